package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestMain lets a test run lanes as a separate process (this test binary
// re-executed with LANES_ARGS), so it can be killed with SIGKILL.
func TestMain(m *testing.M) {
	if args := os.Getenv("LANES_ARGS"); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			panic(err)
		}
		os.Exit(commands.Main(append([]string{"lanes"}, argv...), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// ran is what lanes did in a separate process (this test binary re-executed
// with LANES_ARGS).
type ran struct {
	code           int
	stdout, stderr string
	killed         bool // by SIGKILL, on its trigger
}

// runChild runs lanes ARGS in a child process. When part is not empty it
// is killed with SIGKILL once the server (at url) has seen n API requests
// whose subject contains part; it may finish before that.
func runChild(t testing.TB, url, part string, n int64, args ...string) ran {
	t.Helper()
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	killNow := make(chan struct{})
	var killed atomic.Bool
	if part != "" {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		var seen atomic.Int64
		var once sync.Once
		nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
			if strings.Contains(m.Subject, part) && seen.Add(1) == n {
				once.Do(func() { close(killNow) })
			}
		})
		nc.Flush()
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-killNow:
			killed.Store(true) // before the kill: Wait may return at once
			cmd.Process.Kill()
		case <-exited:
		}
	}()
	err := cmd.Wait()
	close(exited)
	c := ran{stdout: stdout.String(), stderr: stderr.String(), killed: killed.Load()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		c.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return c
}

// killAfter runs lanes in a child process and kills it with SIGKILL once
// the server has seen n API requests whose subject contains part; the
// test fails if lanes finished first.
func killAfter(t *testing.T, url, part string, n int64, args ...string) {
	t.Helper()
	c := runChild(t, url, part, n, args...)
	if !c.killed {
		t.Fatalf("lanes finished before it could be killed: exit %d %s", c.code, c.stderr)
	}
	t.Logf("killed after %d %s requests", n, part)
}

// TestKilledApplyConverges: kill -9 while apply creates 300 lanes; the
// next apply creates the rest, and the one after has nothing to do.
func TestKilledApplyConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (apply killed -9 mid-create, then run again)")
	}
	cleanEnv(t)
	srv := natstest.Start(t)
	base := append([]string{"apply", "--yes", "--server", srv.URL(), "--partitions", "300"}, seed...)
	killAfter(t, srv.URL(), "CONSUMER.CREATE", 100, append(base, "--concurrency", "2")...)
	if code, _, errs := lanes(t, base...); code != 0 {
		t.Fatalf("re-run: exit %d %s", code, errs)
	}
	code, out, _ := lanes(t, base...)
	if code != 0 || !strings.Contains(out, "Nothing to do") {
		t.Fatalf("not converged: exit %d\n%s", code, out)
	}
	_, js := natstest.Connect(t, srv.URL())
	s, _ := js.Stream(context.Background(), "ORDERS")
	if n := s.CachedInfo().State.Consumers; n != 300 {
		t.Fatalf("%d consumers, want exactly 300", n)
	}
}

// TestKilledRecreateKeepsPosition: kill -9 right after apply deletes a
// lane it recreates; the next apply finishes from the recorded position.
func TestKilledRecreateKeepsPosition(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	base := append([]string{"apply", "--yes", "--server", srv.URL(), "--partitions", "2"}, seed...)
	if code, _, errs := lanes(t, base...); code != 0 {
		t.Fatalf("exit %d %s", code, errs)
	}
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(2))
	var seqs []uint64
	for i := 0; len(seqs) < 4; i++ { // four messages for lane 00
		subject := fmt.Sprintf("msgs.received_from.u%d", i)
		if l, _ := p.LaneOf(subject); l.Partition != 0 {
			continue
		}
		ack, err := js.Publish(ctx, subject, nil)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	c, _ := js.Consumer(ctx, "ORDERS", "orders-n2-00")
	fetch := func() jetstream.Msg {
		b, err := c.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			return m
		}
		t.Fatal("no message")
		return nil
	}
	fetch().DoubleAck(ctx) // the first is done; the second stays in flight
	fetch()

	killAfter(t, srv.URL(), "CONSUMER.DELETE.ORDERS.orders-n2-00", 1, append(base, "--max-waiting", "32", "--recreate", "--concurrency", "1")...)
	code, out, errs := lanes(t, append(base, "--max-waiting", "32", "--recreate")...)
	if code != 0 {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errs)
	}
	c, _ = js.Consumer(ctx, "ORDERS", "orders-n2-00")
	for _, want := range seqs[1:] {
		m := fetch()
		md, _ := m.Metadata()
		if md.Sequence.Stream != want {
			t.Fatalf("after kill -9 and re-run the lane delivers %d, want %d", md.Sequence.Stream, want)
		}
		m.DoubleAck(ctx)
	}
	if code, out, _ := lanes(t, append(base, "--max-waiting", "32")...); code != 0 || !strings.Contains(out, "Nothing to do") {
		t.Fatalf("not converged: exit %d\n%s", code, out)
	}
}

// TestSigtermMidApplySaysWhatIsLeft: SIGTERM while apply creates lanes
// exits 130 at once, says it was interrupted (not 'context canceled', once
// per lane), and the result on stdout lists what is left; a re-run
// converges.
func TestSigtermMidApplySaysWhatIsLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: apply stopped mid-create and run again, 9s")
	}
	cleanEnv(t)
	srv := natstest.Start(t)
	base := append([]string{"apply", "--yes", "--server", srv.URL(), "--partitions", "600"}, seed...)
	argv, _ := json.Marshal(append(base, "--concurrency", "2"))
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	sent := make(chan time.Time, 1)
	var proc atomic.Pointer[os.Process] // set once started: creates come after
	stop := onAPI(t, srv.URL(), "CONSUMER.CREATE", 100, func() {
		proc.Load().Signal(syscall.SIGTERM)
		sent <- time.Now()
	})
	defer stop()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proc.Store(cmd.Process)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != commands.ExitInterrupted {
		t.Fatalf("exit %v, want 130\n%s", err, stderr.String())
	}
	if took := time.Since(<-sent); took > 3*time.Second {
		t.Fatalf("took %s to stop after SIGTERM", took)
	}
	if errs := stderr.String(); !strings.Contains(errs, "interrupted by SIGTERM") || strings.Contains(errs, "context canceled") {
		t.Fatalf("stderr: %s", errs)
	}
	if out := stdout.String(); !strings.Contains(out, "Stopped after") || !strings.Contains(out, "not done") || strings.Count(out, "context canceled") > 0 {
		t.Fatalf("stdout must say what is left:\n%s", out)
	}
	if code, out, errs := lanes(t, base...); code != 0 || !strings.Contains(out, "lanes created") {
		t.Fatalf("re-run: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestServerGoneMidApplyStopsWithinTimeout: the server stops while apply
// creates 600 lanes two at a time, --timeout 2s: apply exits 14 within
// about one timeout (not one per remaining lane) and says what is not done.
func TestServerGoneMidApplyStopsWithinTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the server stops mid-apply)")
	}
	cleanEnv(t)
	srv := natstest.Start(t)
	base := append([]string{"apply", "--yes", "--server", srv.URL(), "--partitions", "600", "--timeout", "2s", "--concurrency", "2"}, seed...)
	var stopped time.Time
	stop := onAPI(t, srv.URL(), "CONSUMER.CREATE", 100, func() {
		stopped = time.Now()
		srv.Stop()
	})
	c := runChild(t, "", "", 0, base...)
	stop()
	took := time.Since(stopped)
	if c.code != commands.ExitTimeout && c.code != commands.ExitConnect {
		t.Fatalf("exit %d, want 14 (or 10)\n%s\n%s", c.code, c.stdout, c.stderr)
	}
	if took > 8*time.Second {
		t.Fatalf("took %s to stop with --timeout 2s", took)
	}
	if !strings.Contains(c.stderr, "not done") || !strings.Contains(c.stdout, "not done") || strings.Count(c.stderr, "\n") > 10 {
		t.Fatalf("apply must say, briefly, what is not done:\n%s\n%s", c.stdout, c.stderr)
	}
}
