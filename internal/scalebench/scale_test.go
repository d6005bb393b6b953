//go:build scale

package scalebench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// settle is how long the server is left alone after an apply, or after
// lanes work serves every lane, before an idle window: the writes and
// listings that follow them end within it.
const settle = 5 * time.Second

// newPartitions is the repartition's new lane count: a small generation,
// so that what is timed is noticing new lanes, not creating many.
const newPartitions = 16

// BenchmarkScale: apply fresh and no-op, inspect, idle server CPU with
// nothing attached and with lanes work attached, lanes work's own idle
// CPU, its time to serve every lane, and how soon it serves the lanes of
// a repartition. A fresh server per lane count.
//
//	LANES_SCALE_LANES=4096 LANES_SCALE_IDLE=20s go test -tags scale -run '^$' -bench 'Scale$' -benchtime 1x -timeout 60m ./internal/scalebench
func BenchmarkScale(b *testing.B) {
	idle := envDuration(b, "LANES_SCALE_IDLE", 30*time.Second)
	for _, n := range envInts(b, "LANES_SCALE_LANES", []int{4096, 16384}) {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			var f figures
			for b.Loop() {
				scaleOnce(b, n, idle, &f)
			}
			f.report(b)
		})
	}
}

func scaleOnce(b *testing.B, n int, idle time.Duration, f *figures) {
	srv := startServer(b)
	defer srv.stop()
	design, plan := writeDesign(b, n)

	fresh := apply(b, srv, design, "applied")
	noop := apply(b, srv, design, "nothing_to_do")
	out, _, inspect := run(b, "inspect", "-f", design, "-s", srv.url, "-o", "json") // findings may make it exit non-zero
	if !json.Valid(out) || len(out) == 0 {
		b.Fatalf("lanes inspect -o json printed no JSON document: %q", tail(string(out), 5))
	}
	time.Sleep(settle)
	serverAlone := coreShare(b, idle, srv.pid())[0]

	w := startWork(b, srv, design)
	defer func() { w.stop() }() // the last one started
	w.waitFor(b, fmt.Sprintf("lanes work serving %d lanes", n), 100*time.Millisecond, 5*time.Minute, func() (bool, error) {
		got, err := w.serving()
		return got == n, err
	})
	toServe := time.Since(w.started)
	toStart := w.startedServing(b, n)
	served, err := w.servingLanes()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range plan.Lanes {
		if !served[l.Name] {
			b.Fatalf("/readyz says %d lanes served, but /metrics has no lanes_work_serving 1 for %s", n, l.Name)
		}
	}
	time.Sleep(settle)
	shares := coreShare(b, idle, srv.pid(), w.pid())
	serverWork, workAlone := shares[0], shares[1]
	// The server alone once more, now long after the apply: the lower of
	// the two is the baseline (the first may still pay for the apply).
	w.stop()
	time.Sleep(settle)
	serverAlone = min(serverAlone, coreShare(b, idle, srv.pid())[0])
	w = startWork(b, srv, design)
	w.waitFor(b, fmt.Sprintf("lanes work serving %d lanes again", n), 100*time.Millisecond, 5*time.Minute, func() (bool, error) {
		got, err := w.serving()
		return got == n, err
	})

	// A repartition: its new lanes are created held, the empty old lanes
	// drain at once and are deleted; lanes work follows without a restart.
	design2, plan2 := writeDesign(b, newPartitions)
	repartition := apply(b, srv, design2, "applied")
	applied := time.Now()
	w.waitFor(b, fmt.Sprintf("lanes work serving the %d new lanes", newPartitions), 200*time.Millisecond, 5*time.Minute, func() (bool, error) {
		served, err := w.servingLanes()
		for _, l := range plan2.Lanes {
			if !served[l.Name] {
				return false, err
			}
		}
		return true, err
	})
	newServed := time.Since(applied)

	f.add("s-apply-fresh", fresh.Seconds())
	f.add("ms-apply-noop", ms(noop))
	f.add("ms-inspect", ms(inspect))
	f.add("pct-core-server-idle", serverAlone)
	f.add("s-to-start", toStart.Seconds())
	f.add("s-to-serve", toServe.Seconds())
	f.add("pct-core-server-work", serverWork)
	f.add("x-server-idle", serverWork/serverAlone)
	f.add("pct-core-work", workAlone)
	f.add("s-repartition-apply", repartition.Seconds())
	f.add("s-new-lanes-served", newServed.Seconds())
	b.Logf("%d lanes: apply fresh %.2f s, no-op %.0f ms, inspect %.0f ms; idle over %s: server %.2f%% of a core alone, "+
		"%.2f%% with lanes work attached (%.1fx), lanes work %.2f%%; lanes work started serving every lane %.2f s after it started (its rebalanced line), had taken all %.2f s after; "+
		"repartition to %d: apply %.2f s, new lanes served %.2f s after it ended",
		n, fresh.Seconds(), ms(noop), ms(inspect), idle, serverAlone, serverWork, serverWork/serverAlone, workAlone,
		toStart.Seconds(), toServe.Seconds(), newPartitions, repartition.Seconds(), newServed.Seconds())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// apply runs `lanes apply --yes -o json` (no question asked, a
// repartition included) and checks the status it reports.
func apply(b *testing.B, srv *server, design, want string) time.Duration {
	b.Helper()
	out, code, took := run(b, "apply", "-f", design, "-s", srv.url, "--yes", "-o", "json")
	var doc struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || code != 0 || doc.Status != want {
		b.Fatalf("lanes apply: exit %d, status %q (want %q), error %q, parse: %v", code, doc.Status, want, doc.Error, err)
	}
	return took
}

// worker is a `lanes work` process whose handler never runs (nothing is
// published), with its metrics and probes on a port of its own.
type worker struct {
	*proc
	addr string
}

func startWork(b *testing.B, srv *server, design string) *worker {
	b.Helper()
	w := &worker{addr: fmt.Sprintf("127.0.0.1:%d", freePort(b))}
	w.proc = startProc(b, "lanes-work", binary(b, "lanes"),
		"work", "-f", design, "-s", srv.url, "--exec", "true", "--metrics", w.addr, "--instance", "scalebench")
	return w
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// startedServing is how long after its start lanes work logged that it
// serves n lanes ("rebalanced ... serving=n": every lane's goroutine
// started, each then takes its record and pulls).
func (w *worker) startedServing(b *testing.B, n int) time.Duration {
	b.Helper()
	text, err := os.ReadFile(w.log)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.Contains(line, "msg=rebalanced") || !strings.Contains(line, fmt.Sprintf(" serving=%d ", n)) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			b.Fatalf("lanes work's log line %q: %v", line, err)
		}
		return at.Sub(w.started)
	}
	b.Fatalf("lanes work never logged serving %d lanes: %s", n, w.tail(20))
	return 0
}

// serving is how many lanes the instance serves, as /readyz says ("ready:
// serving 4096 lanes": the lanes whose lanes_work_serving gauge is 1);
// 0 before it serves any, or before it listens.
func (w *worker) serving() (int, error) {
	resp, err := httpClient.Get("http://" + w.addr + "/readyz")
	if err != nil {
		return 0, nil // not listening yet
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(string(body), "ready: serving %d lane", &n); err != nil {
		return 0, nil // joining, or waiting for lanes
	}
	return n, nil
}

// servingLanes is the set of lanes whose lanes_work_serving gauge is 1 on
// /metrics (1: this instance took the lane; see work/metrics.go).
func (w *worker) servingLanes() (map[string]bool, error) {
	resp, err := httpClient.Get("http://" + w.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "lanes_work_serving{") || !strings.HasSuffix(line, "} 1") {
			continue
		}
		_, rest, _ := strings.Cut(line, `lane="`)
		if lane, _, ok := strings.Cut(rest, `"`); ok {
			served[lane] = true
		}
	}
	return served, sc.Err()
}

// waitFor polls cond every interval until it holds. It fails the
// benchmark when lanes work exits, cond errs, or limit passes.
func (w *worker) waitFor(b *testing.B, what string, every, limit time.Duration, cond func() (bool, error)) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		switch {
		case ok:
			return
		case err != nil:
			b.Fatalf("waiting for %s: %v", what, err)
		case !w.running():
			b.Fatalf("waiting for %s: lanes work exited: %v", what, w.cmd.ProcessState)
		case time.Now().After(deadline):
			b.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(every)
	}
}
