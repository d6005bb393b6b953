//go:build unix

package commands_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// probe asks lanes work's --metrics address for a probe: its status, its
// one line of text, and its content type; code 0 when nothing answers.
func probe(t *testing.T, addr, path string) (code int, text, contentType string) {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSuffix(string(b), "\n"), resp.Header.Get("Content-Type")
}

// TestWorkProbes: --metrics serves /healthz and /readyz beside /metrics.
// Joined and serving: both 200. With the server down: /readyz 503 and
// why, /healthz still 200 (the instance reconnects on its own); ready again
// once the server is back.
func TestWorkProbes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a server stopped and started again")
	}
	cleanEnv(t)
	s := natstest.Start(t)
	applyDesign(t, s.URL(), "--partitions", "2")
	addr := freeAddr(t)
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", s.URL(), "--exec", "true", "--metrics", addr, "--lease", "2s")
	want := func(path string, wantCode int, wantText string) func() bool {
		return func() bool {
			code, text, _ := probe(t, addr, path)
			return code == wantCode && text == wantText
		}
	}
	testutil.WaitFor(t, "/readyz: ready, serving both lanes", 30*time.Second, want("/readyz", http.StatusOK, "ready: serving 2 lanes"))
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, text, ct := probe(t, addr, path); code != http.StatusOK || ct != "text/plain; charset=utf-8" || strings.Contains(text, "\n") {
			t.Errorf("%s: %d %q (%s), want 200 and one line of text", path, code, text, ct)
		}
	}
	if code, text, _ := probe(t, addr, "/healthz"); text != "ok" {
		t.Errorf("/healthz: %d %q, want ok", code, text)
	}

	up := s.Down()
	testutil.WaitFor(t, "/readyz: not ready", 30*time.Second, want("/readyz", http.StatusServiceUnavailable, "not ready: disconnected from the server"))
	if code, text, _ := probe(t, addr, "/healthz"); code != http.StatusOK || text != "ok" {
		t.Errorf("/healthz with the server down: %d %q, want 200 ok", code, text)
	}
	up()
	testutil.WaitFor(t, "/readyz: ready again", 60*time.Second, want("/readyz", http.StatusOK, "ready: serving 2 lanes"))
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d\n%s", code, r.err.String())
	}
}
