//go:build unix

package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// runningWork is lanes work run in-process until stop.
type runningWork struct {
	out, err testutil.Buffer
	cancel   context.CancelFunc
	code     chan int
}

func startWorkInProcess(t *testing.T, args ...string) *runningWork {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningWork{cancel: cancel, code: make(chan int, 1)}
	go func() {
		r.code <- commands.MainContext(ctx, append([]string{"lanes", "work"}, args...), strings.NewReader(""), &r.out, &r.err)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the command (as a first SIGTERM does) and returns its code.
func (r *runningWork) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case c := <-r.code:
		r.code <- c
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("lanes work did not stop within 30s")
		return -1
	}
}

// workArgs is lanes work on the seed design.
func workArgs(extra ...string) []string {
	return append(append([]string{"work"}, seed...), extra...)
}

// applyDesign applies the seed design with extra flags and returns its plan.
func applyDesign(t *testing.T, url string, extra ...string) *planner.Plan {
	t.Helper()
	args := append(append([]string{"apply", "--yes", "--server", url}, seed...), extra...)
	if code, out, errs := lanes(t, args...); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	d := testutil.ReadDesign(t, "../examples/seed/lanes.yaml")
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "--partitions" {
			d.Partitions, _ = strconv.Atoi(extra[i+1])
		}
	}
	return testutil.PlanDesign(t, d)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWorkUsage: bad flags exit 2 with one message naming the flag, and
// nothing on stdout, before connecting to anything.
func TestWorkUsage(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"work", "--stream", "ORDERS"}, "--exec CMD"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--http", "http://x"}, "choose one"},
		{[]string{"work", "--stream", "ORDERS", "--exec", " "}, "--exec"},
		{[]string{"work", "--stream", "ORDERS", "--http", "ftp://x"}, "--http"},
		{[]string{"work", "--stream", "ORDERS", "--http", "http://127.0.0.1:99999/msg"}, "not a port"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "nosuch-lanes-program --x"}, "nosuch-lanes-program: not found on PATH"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "./nosuch-handler.sh"}, "--exec \"./nosuch-handler.sh\": ./nosuch-handler.sh: no such file"},
		{[]string{"work", "--exec", "true"}, "--stream"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--lease", "1500ms"}, "--lease"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--lease", "1s"}, "--lease"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--on-poison", "park"}, "--on-poison"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--on-poison", "drop"}, "--on-poison"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--dead-letter", "dlq.*"}, "--dead-letter"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--park-after", "0"}, "--park-after"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--instance", "a b"}, "--instance"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--log-format", "xml"}, "--log-format"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "extra"}, "no arguments"},
		{[]string{"work", "-f", "../examples/seed/lanes.yaml", "--exec", "true", "--partitions", "0"}, "partitions"},
		// 0 is no lease and no grace: refused, not silently the default
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--lease", "0"}, "--lease 0s: must be whole seconds, at least 2s"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--grace", "0"}, "--grace 0s:"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--grace", "-1s"}, "--grace -1s:"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--instance", ""}, "--instance"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--metrics", "nonsense"}, "--metrics"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--metrics", "127.0.0.1:99999"}, "--metrics"},
		// long values are cut where they are echoed
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--instance", strings.Repeat("i", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--instance", strings.Repeat("b ", 5000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--on-poison", strings.Repeat("p", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--dead-letter", strings.Repeat("d*", 5000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--log-format", strings.Repeat("l", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", strings.Repeat("x", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", strings.Repeat(" ", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--http", "http://" + strings.Repeat("h", 10000)}, "bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", "--metrics", strings.Repeat("m", 10000)}, "(10000 bytes)"},
		{[]string{"work", "--stream", "ORDERS", "--exec", "true", strings.Repeat("a", 10000)}, "(10000 bytes)"},
	} {
		code, out, errs := lanes(t, tc.args...)
		if code != commands.ExitUsage || !strings.Contains(errs, tc.say) || out != "" || strings.Count(strings.TrimSpace(errs), "\n") > 0 || len(errs) > 600 {
			t.Errorf("%v: exit %d (want 2), stderr %q (want one line with %q, under 600 bytes), stdout %q", cut(tc.args), code, cut1(errs), tc.say, out)
		}
	}
}

// cut shortens long arguments for a test's message.
func cut(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = cut1(a)
	}
	return out
}

func cut1(s string) string {
	if len(s) > 100 {
		return s[:100] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// TestWorkNeedsTheStream: a missing stream or dead-letter stream is one
// clear error, before any lane is touched.
func TestWorkNeedsTheStream(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	code, _, errs := lanes(t, "work", "--stream", "NOPE", "--exec", "true", "-s", srv.URL())
	if code != commands.ExitError || !strings.Contains(errs, "stream NOPE not found") {
		t.Errorf("missing stream: exit %d, %q", code, errs)
	}
	applyDesign(t, srv.URL(), "--partitions", "1")
	code, _, errs = lanes(t, "work", "--stream", "ORDERS", "--exec", "true", "-s", srv.URL(), "--on-poison", "park", "--dead-letter", "dlq.orders")
	if code != commands.ExitError || !strings.Contains(errs, "no stream stores it") {
		t.Errorf("dead letter without a stream: exit %d, %q", code, errs)
	}
	code, _, errs = lanes(t, "work", "--stream", "ORDERS", "--exec", "true", "-s", srv.URL(), "--dead-letter", "msgs.received_from.x")
	if code != commands.ExitError || !strings.Contains(errs, "design's own stream") {
		t.Errorf("dead letter into the design's stream: exit %d, %q", code, errs)
	}
}

// TestWorkKillMidRun: instances of lanes work --http run as processes;
// one is killed with SIGKILL while messages are published. Every message
// is processed, each key in order (the killed instance's message in
// flight may run again), no lane runs two calls at once, the others take
// the killed instance's lanes, and they stop with exit 0 on SIGTERM.
func TestWorkKillMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (an instance killed -9 mid-run, its lease and ack wait let pass), 20s")
	}
	for _, tc := range []struct {
		name      string
		cluster   bool
		instances int
	}{
		{"single/2", false, 2},
		{"single/3", false, 3},
		{"cluster/3", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			var url string
			applyExtra := []string{"--partitions", "8", "--ack-wait", "2s"}
			timeout := "5s"
			if tc.cluster {
				cl := natstest.StartCluster(t, 3)
				url = cl.URLs()
				applyExtra = append(applyExtra, "--replicas", "3", "--pinned")
				// The instances race to create the R3 membership bucket, and
				// the server can leave the second of two concurrent creates
				// unanswered: without work's retry (openBucket) that
				// instance exited at its --timeout ("membership bucket
				// lanes_work: context deadline exceeded") in about half the
				// runs of this test.
			} else {
				url = natstest.Start(t).URL()
			}
			p := applyDesign(t, url, applyExtra...)
			_, js := natstest.Connect(t, url)
			rec := newCallRecorder(t, 3*time.Millisecond)
			var children []*exec.Cmd
			for i := 0; i < tc.instances; i++ {
				cmd, stderr := startLanes(t, workArgs("-s", url, "--timeout", timeout, "--http", rec.URL, "--instance", fmt.Sprintf("w%d", i), "--lease", "2s", "--verbose", "--status-every", "3s")...)
				children = append(children, cmd)
				t.Cleanup(func() {
					if t.Failed() {
						cmd.Process.Kill()
						cmd.Wait()
						t.Logf("w%d stderr:\n%s", i, stderr)
					}
				})
			}
			pub := startPublisher(t, js, p, 24, 2*time.Millisecond)
			start := time.Now()
			testutil.WaitFor(t, "every instance serving", 45*time.Second, func() bool {
				return len(instancesServing(rec.snapshot(), start)) == tc.instances
			})
			children[0].Process.Kill()
			killed := time.Now()
			waitExit(t, children[0], 5*time.Second)
			time.Sleep(5 * time.Second) // the lease (2s) and the ack wait (2s) pass while publishing goes on
			n := pub.finish()
			testutil.WaitFor(t, fmt.Sprintf("%d messages processed", n), 30*time.Second, func() bool { return rec.distinct() >= n })
			calls := rec.snapshot()
			checkWorkCalls(t, calls, n, "w0")
			lanesAfter := map[string]bool{}
			for _, c := range calls {
				if c.start.After(killed.Add(4500 * time.Millisecond)) {
					if c.instance == "w0" {
						t.Errorf("the killed instance made a call after the kill")
					}
					lanesAfter[c.lane] = true
				}
			}
			t.Logf("%d messages; lanes served after the kill: %d", n, len(lanesAfter))
			for _, cmd := range children[1:] {
				if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
					t.Errorf("SIGTERM: exit %d, want 0", code)
				}
			}
		})
	}
}

// TestWorkJoinLeave: while messages are published, a second and a third
// instance join, then the first leaves on SIGTERM: every message is
// processed once, in key order, one call at a time per lane, and the
// joiners take lanes at once.
func TestWorkJoinLeave(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "8")
	_, js := natstest.Connect(t, url)
	rec := newCallRecorder(t, 2*time.Millisecond)
	start := func(name string) *exec.Cmd {
		cmd, _ := startLanes(t, workArgs("-s", url, "--http", rec.URL, "--instance", name)...)
		return cmd
	}
	pub := startPublisher(t, js, p, 16, 2*time.Millisecond)
	w0 := start("w0")
	testutil.WaitFor(t, "w0 serving", 20*time.Second, func() bool { return instancesServing(rec.snapshot(), time.Time{})["w0"] })
	for _, name := range []string{"w1", "w2"} {
		joined := time.Now()
		start(name)
		testutil.WaitFor(t, name+" serving", 10*time.Second, func() bool { return instancesServing(rec.snapshot(), joined)[name] })
		t.Logf("%s made its first call %s after it started", name, time.Since(joined))
	}
	left := time.Now()
	if code := stopChild(t, w0, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("w0 SIGTERM: exit %d", code)
	}
	time.Sleep(time.Second)
	n := pub.finish()
	testutil.WaitFor(t, fmt.Sprintf("%d messages", n), 30*time.Second, func() bool { return rec.distinct() >= n })
	calls := rec.snapshot()
	checkWorkCalls(t, calls, n, "")
	lanesAfter := map[string]bool{}
	for _, c := range calls {
		if c.start.After(left.Add(500 * time.Millisecond)) {
			lanesAfter[c.lane] = true
			if c.instance == "w0" {
				t.Errorf("w0 made a call %s after SIGTERM", c.start.Sub(left))
			}
		}
	}
	if len(lanesAfter) != 8 {
		t.Errorf("after w0 left, %d lanes were served, want 8", len(lanesAfter))
	}
}

// TestWorkSIGTERMHandsOver: SIGTERM while a message is in flight lets it
// finish and acks it (no redelivery), hands the lane to the other
// instance at once and exits 0, saying so. SIGHUP (a closed terminal, a
// dropped ssh session) does the same, also when it comes twice (the
// kernel, then the shell passing it on). A second SIGTERM instead hands the
// message back at once (the other instance runs it as attempt 2, long
// before the 30s ack wait) and exits 130.
func TestWorkSIGTERMHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three stops during 1.5s handlers, 5s")
	}
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		twice bool
	}{
		{"once", syscall.SIGTERM, false},
		{"SIGHUP", syscall.SIGHUP, false},
		{"twice", syscall.SIGTERM, true},
	} {
		twice := tc.twice
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			url := natstest.Start(t).URL()
			p := applyDesign(t, url, "--partitions", "1")
			_, js := natstest.Connect(t, url)
			rec := newCallRecorder(t, 1500*time.Millisecond)
			cmds := map[string]*exec.Cmd{}
			stderrs := map[string]*testutil.Buffer{}
			for _, name := range []string{"a", "b"} {
				cmd, stderr := startLanes(t, workArgs("-s", url, "--http", rec.URL, "--instance", name)...)
				cmds[name], stderrs[name] = cmd, stderr
			}
			testutil.WaitFor(t, "both joined", 10*time.Second, func() bool { return members(t, url) == 2 })
			subject, _ := p.SubjectForKey("alice")
			natstest.Publish(t, js, subject, subject)
			var first workCall
			testutil.WaitFor(t, "the first call", 10*time.Second, func() bool {
				s := rec.startedCalls()
				if len(s) > 0 {
					first = s[0]
				}
				return len(s) > 0
			})
			rec.work.Store(int64(10 * time.Millisecond))
			owner, other := first.instance, map[string]string{"a": "b", "b": "a"}[first.instance]
			signalled := time.Now()
			cmds[owner].Process.Signal(tc.sig)
			want := 0
			if twice || tc.sig == syscall.SIGHUP {
				// The second comes once the first is being acted on: the
				// owner says it is stopping, its message still in flight.
				testutil.WaitFor(t, owner+" stopping", 10*time.Second, func() bool {
					return strings.Contains(stderrs[owner].String(), `msg="stopping: finishing messages in flight" in_flight=1`)
				})
				cmds[owner].Process.Signal(tc.sig)
			}
			if twice {
				want = commands.ExitInterrupted
			}
			code := waitExit(t, cmds[owner], 10*time.Second)
			took := time.Since(signalled)
			if code != want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, want, stderrs[owner])
			}
			if !twice && !strings.Contains(stderrs[owner].String(), "stopped:") {
				t.Errorf("no stop log; stderr:\n%s", stderrs[owner])
			}
			testutil.WaitFor(t, "both messages done by the other", 10*time.Second, func() bool {
				for _, c := range rec.snapshot() {
					if c.instance == other && c.seq == 2 {
						return true
					}
				}
				return false
			})
			calls := rec.snapshot()
			if !twice {
				if took < time.Second || took > 5*time.Second {
					t.Errorf("stopped %s after SIGTERM: it should finish the 1.5s call first", took)
				}
				checkWorkCalls(t, calls, 2, "")
				for _, c := range calls {
					if c.seq == 2 && c.instance != other {
						t.Errorf("seq 2 ran on %s, want %s", c.instance, other)
					}
				}
				return
			}
			if took > time.Second {
				t.Errorf("stopped %s after the second SIGTERM", took)
			}
			var again *workCall
			for _, c := range calls {
				if c.seq == 1 && c.instance == other {
					again = &c
				}
			}
			if again == nil || again.attempt != 2 || again.start.Sub(signalled) > 5*time.Second {
				t.Errorf("the message handed back was not run again at once by %s: %+v", other, again)
			}
		})
	}
}

// members counts the live instances of the seed design.
func members(t *testing.T, url string) int {
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sv, err := membership.ReadServing(ctx, js, "ORDERS", "orders")
	if err != nil {
		return 0
	}
	return len(sv.Members)
}

// TestWorkExecContract: --exec gets the payload on stdin and the message's
// metadata and headers in LANES_* variables; exit 65 terminates (no
// retry, the lane moves on); any other exit retries after the default
// backoff (1s) with LANES_ATTEMPT counting up; the handler's output goes
// to lanes work's stdout.
func TestWorkExecContract(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "1")
	nc, _ := natstest.Connect(t, url)
	dir := t.TempDir()
	script := filepath.Join(dir, "handler.sh")
	os.WriteFile(script, []byte(`#!/bin/sh
out="$OUT/$LANES_SEQ.$LANES_ATTEMPT"
env | grep '^LANES_' | sort > "$out.env"
cat > "$out.data"
echo "handled $LANES_SEQ"
case "$(cat "$out.data")" in
poison) exit 65 ;;
flaky) [ "$LANES_ATTEMPT" -ge 2 ] || exit 3 ;;
esac
`), 0o755)
	t.Setenv("OUT", dir)
	subject, _ := p.SubjectForKey("alice")
	m := nats.NewMsg(subject)
	m.Data = []byte("hello\nworld")
	m.Header.Set("Trace-Id", "abc-123")
	m.Header.Add("X-Multi", "a")
	m.Header.Add("X-Multi", "b")
	for _, msg := range []*nats.Msg{m, {Subject: subject, Data: []byte("poison")}, {Subject: subject, Data: []byte("flaky")}} {
		if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--exec", "sh "+script, "--instance", "inst-1")
	testutil.WaitFor(t, "seq 3 attempt 2", 20*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "3.2.env"))
		return err == nil
	})
	time.Sleep(200 * time.Millisecond)
	if code := r.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, r.err.String())
	}
	env := string(mustRead(t, filepath.Join(dir, "1.1.env")))
	for _, want := range []string{
		"LANES_STREAM=ORDERS", "LANES_LANE=orders-n1-00", "LANES_PARTITION=0", "LANES_SUBJECT=msgs.received_from.n1.0.alice",
		"LANES_KEY=alice", "LANES_SEQ=1", "LANES_ATTEMPT=1", "LANES_INSTANCE=inst-1", "LANES_HEADER_TRACE_ID=abc-123", "LANES_HEADER_X_MULTI=a,b",
	} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	if i := strings.Index(env, "LANES_PUBLISHED="); i < 0 {
		t.Errorf("no LANES_PUBLISHED")
	} else if _, err := time.Parse(time.RFC3339Nano, strings.SplitN(env[i+16:], "\n", 2)[0]); err != nil {
		t.Errorf("LANES_PUBLISHED: %v", err)
	}
	if got := string(mustRead(t, filepath.Join(dir, "1.1.data"))); got != "hello\nworld" {
		t.Errorf("stdin %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "2.2.env")); err == nil {
		t.Error("exit 65 was retried")
	}
	a1, _ := os.Stat(filepath.Join(dir, "3.1.env"))
	a2, _ := os.Stat(filepath.Join(dir, "3.2.env"))
	if gap := a2.ModTime().Sub(a1.ModTime()); gap < 800*time.Millisecond || gap > 3*time.Second {
		t.Errorf("retried %s after the failure, want about 1s", gap)
	}
	if out := r.out.String(); !strings.Contains(out, "handled 1\n") || !strings.Contains(out, "handled 3\n") {
		t.Errorf("handler output not on stdout: %q", out)
	}
	if e := r.err.String(); !strings.Contains(e, "terminated by the handler") || !strings.Contains(e, "exit 3") {
		t.Errorf("stderr does not log the term and the failure:\n%s", e)
	}
}

// TestWorkHTTPContract: --http POSTs the payload with Lanes-* headers;
// 2xx acks, 422 or a Lanes-Term header terminates, a 503 with Retry-After
// is retried after it.
func TestWorkHTTPContract(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "1")
	nc, _ := natstest.Connect(t, url)
	type seen struct {
		h    http.Header
		body string
		at   time.Time
	}
	var mu sync.Mutex
	got := map[string][]seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[string(body)] = append(got[string(body)], seen{r.Header.Clone(), string(body), time.Now()})
		n := len(got[string(body)])
		mu.Unlock()
		switch string(body) {
		case "bad":
			w.WriteHeader(422)
		case "gone":
			w.Header().Set("Lanes-Term", "customer deleted")
		case "busy":
			if n == 1 {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(503)
			}
		}
	}))
	defer srv.Close()
	subject, _ := p.SubjectForKey("bob")
	m := nats.NewMsg(subject)
	m.Data = []byte("ok")
	m.Header.Set("Trace-Id", "t1")
	for _, msg := range []*nats.Msg{m, {Subject: subject, Data: []byte("bad")}, {Subject: subject, Data: []byte("gone")}, {Subject: subject, Data: []byte("busy")}} {
		if _, err := nc.RequestMsg(msg, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--http", srv.URL+"/msg", "--instance", "h1")
	testutil.WaitFor(t, "busy retried", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["busy"]) == 2
	})
	time.Sleep(200 * time.Millisecond)
	r.stop(t)
	mu.Lock()
	defer mu.Unlock()
	h := got["ok"][0].h
	for k, v := range map[string]string{"Lanes-Stream": "ORDERS", "Lanes-Lane": "orders-n1-00", "Lanes-Partition": "0", "Lanes-Key": "bob",
		"Lanes-Subject": "msgs.received_from.n1.0.bob", "Lanes-Seq": "1", "Lanes-Attempt": "1", "Lanes-Instance": "h1", "Lanes-Header-Trace-Id": "t1"} {
		if h.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
		}
	}
	if len(got["bad"]) != 1 || len(got["gone"]) != 1 {
		t.Errorf("terminated messages were retried: bad %d, gone %d", len(got["bad"]), len(got["gone"]))
	}
	if gap := got["busy"][1].at.Sub(got["busy"][0].at); gap < 1800*time.Millisecond || gap > 4*time.Second {
		t.Errorf("Retry-After 2 was retried after %s", gap)
	}
	if e := r.err.String(); !strings.Contains(e, "customer deleted") {
		t.Errorf("the Lanes-Term reason is not logged:\n%s", e)
	}
}

// TestWorkMaxProcessTime: a handler that hangs is killed with its whole
// process group at --max-process-time, and the message is retried.
func TestWorkMaxProcessTime(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "1")
	_, js := natstest.Connect(t, url)
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	subject, _ := p.SubjectForKey("carol")
	natstest.Publish(t, js, subject)
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--max-process-time", "700ms",
		"--exec", `if [ "$LANES_ATTEMPT" = 1 ]; then sleep 30 & echo $! > "$OUT/pid"; wait; fi; touch "$OUT/done"`)
	testutil.WaitFor(t, "the retry", 20*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "done"))
		return err == nil
	})
	pid, _ := strconv.Atoi(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, "pid")))))
	if pid == 0 || alive(pid) {
		t.Errorf("the hung handler's child (sleep, pid %d) is still alive: the process group was not killed", pid)
	}
	r.stop(t)
	if e := r.err.String(); !strings.Contains(e, "max process time") {
		t.Errorf("stderr does not say why:\n%s", e)
	}
}

// TestWorkMetricsAndStatus: --metrics serves per-lane series; without a
// terminal, a status line is logged every --status-every.
func TestWorkMetricsAndStatus(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "2")
	_, js := natstest.Connect(t, url)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 3)...)
	addr := freeAddr(t)
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--exec", "true", "--metrics", addr, "--status-every", "200ms", "--log-format", "json")
	body := waitMetrics(t, addr, `lanes_work_processed_total{lane="orders-n2-01",stream="ORDERS"} 3`)
	for _, want := range []string{
		`lanes_work_serving{lane="orders-n2-00",stream="ORDERS"} 1`,
		`lanes_work_failed_total{lane="orders-n2-01",stream="ORDERS"} 0`,
		`lanes_work_parked_total{lane="orders-n2-01",stream="ORDERS"} 0`,
		`lanes_work_in_flight_age_seconds{lane="orders-n2-01",stream="ORDERS"} 0`,
		`lanes_work_processing_seconds_count{lane="orders-n2-01",stream="ORDERS"} 3`,
		`lanes_work_members{design="orders",stream="ORDERS"} 1`,
		`lanes_work_lanes{design="orders",stream="ORDERS"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	testutil.WaitFor(t, "a status line", 5*time.Second, func() bool { return strings.Contains(r.err.String(), `"msg":"status"`) })
	r.stop(t)
	for _, line := range strings.Split(strings.TrimSpace(r.err.String()), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Errorf("not a JSON log line: %q", line)
		}
	}
}

// TestWorkRepartitionUnderLoad: two instances run while publishers keep
// publishing and lanes apply repartitions 4 -> 8. Nothing restarts: the
// instances serve the new lanes as they appear (held, then resumed), the
// old ones drain and are dropped; every message is processed once, each
// key in order across the change.
func TestWorkRepartitionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a repartition under a steady load, 2s and more")
	}
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "4")
	_, js := natstest.Connect(t, url)
	rec := newCallRecorder(t, 2*time.Millisecond)
	var children []*exec.Cmd
	for _, name := range []string{"w0", "w1"} {
		cmd, _ := startLanes(t, workArgs("-s", url, "--http", rec.URL, "--instance", name)...)
		children = append(children, cmd)
	}
	pub := startPublisher(t, js, p, 32, time.Millisecond)
	testutil.WaitFor(t, "both serving", 20*time.Second, func() bool { return len(instancesServing(rec.snapshot(), time.Time{})) == 2 })
	time.Sleep(300 * time.Millisecond)
	code, out, errs := lanes(t, "apply", "--yes", "-f", "../examples/seed/lanes.yaml", "--server", url, "--partitions", "8")
	if code != 0 {
		t.Fatalf("repartition: exit %d\n%s\n%s", code, out, errs)
	}
	applied := time.Now()
	time.Sleep(time.Second)
	n := pub.finish()
	testutil.WaitFor(t, fmt.Sprintf("%d messages", n), 30*time.Second, func() bool { return rec.distinct() >= n })
	calls := rec.snapshot()
	checkWorkCalls(t, calls, n, "")
	for _, c := range calls {
		if c.start.After(applied) && !strings.Contains(c.lane, "-n8-") {
			t.Errorf("an old lane (%s) ran a message after the repartition", c.lane)
		}
	}
	// Settled: the new lanes are spread 4/4 (as the bucket says).
	_, js2 := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sv, err := membership.ReadServing(ctx, js2, "ORDERS", "orders")
	if err != nil {
		t.Fatal(err)
	}
	perInstance := map[string]int{}
	for _, l := range applyDesign(t, url, "--partitions", "8").Lanes {
		perInstance[sv.Lanes[l.Name].Instance]++
	}
	if perInstance["w0"] != 4 || perInstance["w1"] != 4 {
		t.Errorf("the new lanes are served %v, want 4 each", perInstance)
	}
	t.Logf("%d messages across the repartition", n)
	for _, cmd := range children {
		if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Errorf("SIGTERM: exit %d", code)
		}
	}
}

// TestWorkKillLeavesNoHandler: an --exec handler (sh and what it started,
// here a long sleep in the background) does not outlive a lanes work that
// is killed with SIGKILL: its whole process group is gone at once, not
// left running under init beside the message's redelivery.
func TestWorkKillLeavesNoHandler(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("the test reads process groups from /proc")
	}
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "2")
	_, js := natstest.Connect(t, url)
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	natstest.Publish(t, js, append(natstest.SubjectsFor(t, p, 0, 1), natstest.SubjectsFor(t, p, 1, 1)...)...) // one per lane
	cmd, stderr := startLanes(t, "work", "--stream", "ORDERS", "-s", url, "--instance", "k1",
		"--exec", `sleep 300 & echo $! > "$OUT/$LANES_SEQ.child"; read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid > "$OUT/$LANES_SEQ.group"; wait`)
	var groups []int
	testutil.WaitFor(t, "both handlers running", 20*time.Second, func() bool {
		groups = groups[:0]
		for seq := 1; seq <= 2; seq++ {
			for _, f := range []string{"child", "group"} {
				if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%d.%s", seq, f))); err != nil {
					return false
				}
			}
			g, _ := strconv.Atoi(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, fmt.Sprintf("%d.group", seq))))))
			groups = append(groups, g)
		}
		return true
	})
	t.Cleanup(func() {
		for _, g := range groups {
			syscall.Kill(-g, syscall.SIGKILL) // what a failed run left behind
		}
	})
	for _, g := range groups {
		if n := len(groupMembers(g)); n < 3 {
			t.Fatalf("process group %d has %d live processes, want its keeper, sh and its sleep", g, n)
		}
	}
	cmd.Process.Kill()
	waitExit(t, cmd, 5*time.Second)
	killed := time.Now()
	testutil.WaitFor(t, "the handlers' process groups gone", 5*time.Second, func() bool {
		for _, g := range groups {
			if len(groupMembers(g)) > 0 {
				return false
			}
		}
		return true
	})
	t.Logf("handlers gone %s after the kill", time.Since(killed).Round(time.Millisecond))
	for seq := 1; seq <= 2; seq++ {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, fmt.Sprintf("%d.child", seq))))))
		if alive(pid) {
			t.Errorf("the handler's child (sleep, pid %d) outlived lanes work; stderr:\n%s", pid, stderr)
		}
	}
}

// groupMembers lists the live processes (zombies excluded) of process
// group pgid, from /proc.
func groupMembers(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:])) // state, ppid, pgrp, ...
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}

// TestWorkHandlerOutage: a handler that cannot run (its program missing,
// its service refusing connections, lanes work's stdout closed) fails
// every message the same way: that is an outage, not poison. Under
// --on-poison park --park-after 1 nothing is parked: the message waits
// (attempt 1, not redelivered), the outage is logged once and shown in the
// metrics, and once the handler can run the message is processed and the
// end of the outage logged.
func TestWorkHandlerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: outages retried after growing delays, 3s")
	}
	cleanEnv(t)
	url := natstest.Start(t).URL()
	applyDesign(t, url, "--partitions", "1")
	nc, js := natstest.Connect(t, url)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	park := []string{"work", "--stream", "ORDERS", "-s", url, "--on-poison", "park", "--park-after", "1", "--dead-letter", "dlq.orders"}
	publish := func(t *testing.T, data string) {
		t.Helper()
		if _, err := js.Publish(context.Background(), "msgs.received_from.alice", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	noneParked := func(t *testing.T) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if n, _, _, err := membership.CountParked(ctx, jsapi.New(connect.Around(js, 5*time.Second)), "dlq.orders"); err != nil || n != 0 {
			t.Errorf("%d messages parked (%v), want none", n, err)
		}
	}
	_ = nc
	// waitRetried waits until the handler was tried again and could still
	// not run (lanes work --verbose says so): with --park-after 1 a failure
	// would have parked the message at the first try, so nothing parked
	// after a second one shows that an outage is no failure.
	waitRetried := func(t *testing.T, stderr *testutil.Buffer) {
		t.Helper()
		testutil.WaitFor(t, "a second try that could not run", 20*time.Second, func() bool {
			return strings.Contains(stderr.String(), `msg="the handler still cannot run" lane=orders-n1-00 tries=2`)
		})
	}

	t.Run("exec program missing", func(t *testing.T) {
		bin := t.TempDir()
		out := t.TempDir()
		t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		t.Setenv("OUT", out)
		// cd first: the program is looked for only by the shell, at run time
		cmd, stderr := startLanes(t, append(park, "--instance", "x1", "--exec", "cd . && lanes-outage-handler", "--status-every", "300ms", "--verbose")...)
		publish(t, "e1")
		testutil.WaitFor(t, "the outage logged", 20*time.Second, func() bool { return strings.Contains(stderr.String(), "handler outage:") })
		testutil.WaitFor(t, "the outage in the status line", 5*time.Second, func() bool {
			return strings.Contains(stderr.String(), "handler_outage_lanes=1") && strings.Contains(stderr.String(), `handler_outage="the handler could not run: exit 127`)
		})
		outageFinding := func() bool {
			code, out, _ := lanesRun("inspect", "-s", url, "--stream", "ORDERS", "-o", "json", "--fail-on", "severity>=warning")
			var d servingDoc
			return code == commands.ExitThreshold && json.Unmarshal([]byte(out), &d) == nil && d.codes()["handler_outage"] == 1
		}
		testutil.WaitFor(t, "inspect to report the outage", 20*time.Second, outageFinding)
		waitRetried(t, stderr)
		noneParked(t)
		os.WriteFile(filepath.Join(bin, "lanes-outage-handler"), []byte("#!/bin/sh\necho \"$LANES_SEQ $LANES_ATTEMPT\" >> \"$OUT/done\"\n"), 0o755)
		testutil.WaitFor(t, "the message processed", 20*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(out, "done"))
			return len(b) > 0
		})
		if got := string(mustRead(t, filepath.Join(out, "done"))); got != "1 1\n" {
			t.Errorf("the handler ran as %q, want seq 1, attempt 1: the message was redelivered", got)
		}
		testutil.WaitFor(t, "the outage's end logged", 10*time.Second, func() bool { return strings.Contains(stderr.String(), "handler outage over") })
		testutil.WaitFor(t, "inspect to see the outage over", 10*time.Second, func() bool { return !outageFinding() })
		if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Errorf("exit %d", code)
		}
		if e := stderr.String(); strings.Count(e, "handler outage:") != 1 || strings.Contains(e, "message parked") {
			t.Errorf("the outage should be logged once, nothing parked:\n%s", e)
		}
		noneParked(t)
	})

	t.Run("http connection refused", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		mln, _ := net.Listen("tcp", "127.0.0.1:0")
		metrics := mln.Addr().String()
		mln.Close()
		cmd, stderr := startLanes(t, append(park, "--instance", "h1", "--http", "http://"+addr+"/msg", "--metrics", metrics)...)
		publish(t, "h1")
		testutil.WaitFor(t, "the outage logged", 20*time.Second, func() bool { return strings.Contains(stderr.String(), "handler outage:") })
		var body string
		testutil.WaitFor(t, "the outage in the metrics", 10*time.Second, func() bool {
			resp, err := http.Get("http://" + metrics + "/metrics")
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			return strings.Contains(body, `lanes_work_handler_outage{lane="orders-n1-00",stream="ORDERS"} 1`)
		})
		noneParked(t)
		var attempts []string
		var mu sync.Mutex
		srv := &http.Server{Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			attempts = append(attempts, r.Header.Get("Lanes-Attempt"))
			mu.Unlock()
		})}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skip("the port was taken meanwhile:", err)
		}
		go srv.Serve(ln)
		defer srv.Close()
		testutil.WaitFor(t, "the message processed", 20*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(attempts) > 0
		})
		testutil.WaitFor(t, "the outage's end logged", 10*time.Second, func() bool { return strings.Contains(stderr.String(), "handler outage over") })
		mu.Lock()
		if len(attempts) != 1 || attempts[0] != "1" {
			t.Errorf("attempts %v, want one, attempt 1", attempts)
		}
		mu.Unlock()
		if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Errorf("exit %d", code)
		}
		noneParked(t)
	})

	t.Run("stdout closed", func(t *testing.T) {
		start := func(name string) (*exec.Cmd, *testutil.Buffer, *os.File) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			argv, _ := json.Marshal(append(park, "--instance", name, "--exec", "echo handled $LANES_SEQ", "--verbose"))
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
			var stderr testutil.Buffer
			cmd.Stdout, cmd.Stderr = w, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			t.Cleanup(func() { cmd.Process.Kill(); r.Close() })
			return cmd, &stderr, r
		}
		// closed before the start: refused at once
		cmd, stderr, r := start("s0")
		r.Close()
		if code := waitExit(t, cmd, 20*time.Second); code != commands.ExitError || !strings.Contains(stderr.String(), "stdout is closed") {
			t.Errorf("exit %d, want 1 saying stdout is closed; stderr:\n%s", code, stderr)
		}
		// closed while running: the message waits, nothing is parked
		cmd, stderr, r = start("s1")
		testutil.WaitFor(t, "joined", 20*time.Second, func() bool { return strings.Contains(stderr.String(), "rebalanced") })
		r.Close()
		publish(t, "s1")
		testutil.WaitFor(t, "the outage logged", 20*time.Second, func() bool { return strings.Contains(stderr.String(), "handler outage:") })
		if !strings.Contains(stderr.String(), "stdout is closed") {
			t.Errorf("the outage does not say why:\n%s", stderr)
		}
		waitRetried(t, stderr)
		noneParked(t)
		if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Errorf("exit %d, want 0 (the message handed back); stderr:\n%s", code, stderr)
		}
		noneParked(t)
	})
}

// TestWorkClosedStderr: lanes work whose stderr is a pipe that closed
// (lanes work 2>&1 | head, once head has exited) is not killed by SIGPIPE
// at its next log line: it still stops as asked, handing over, exit 0.
func TestWorkClosedStderr(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	applyDesign(t, url, "--partitions", "1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := json.Marshal([]string{"work", "--stream", "ORDERS", "-s", url, "--exec", "true"})
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	w.Close()
	line := make([]byte, 4096)
	var seen string
	for !strings.Contains(seen, "rebalanced") {
		n, err := r.Read(line)
		if err != nil {
			t.Fatalf("lanes work's stderr ended: %v; it said %q", err, seen)
		}
		seen += string(line[:n])
	}
	r.Close()
	if code := stopChild(t, cmd, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Errorf("exit %d, want 0: a log line into the closed stderr killed it", code)
	}
}

// TestWorkStopSaysWhatHappened: the stop's last line says what became of
// the messages in flight and of the membership, instead of always
// "finished and acked, lanes handed over": a message that failed during
// the grace period failed; with the server gone, leaving the membership
// failed and the acks were not confirmed.
func TestWorkStopSaysWhatHappened(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: stops that fail during the grace or lose the server, 10s")
	}
	cleanEnv(t)
	t.Run("a message fails during the grace", func(t *testing.T) {
		url := natstest.Start(t).URL()
		p := applyDesign(t, url, "--partitions", "1")
		_, js := natstest.Connect(t, url)
		dir := t.TempDir()
		t.Setenv("OUT", dir)
		subject, _ := p.SubjectForKey("alice")
		natstest.Publish(t, js, subject)
		r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--exec", `touch "$OUT/started"; sleep 1; exit 3`)
		testutil.WaitFor(t, "the handler running", 20*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(dir, "started"))
			return err == nil
		})
		if code := r.stop(t); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		e := r.err.String()
		t.Log(stopLine(e))
		if strings.Contains(e, "finished and acked") || !strings.Contains(e, "stopped: 1 message in flight failed") || !strings.Contains(e, "lanes handed over") {
			t.Errorf("the stop does not say that the message failed:\n%s", e)
		}
	})
	t.Run("the server is gone", func(t *testing.T) {
		srv := natstest.Start(t)
		url := srv.URL()
		p := applyDesign(t, url, "--partitions", "1")
		_, js := natstest.Connect(t, url)
		dir := t.TempDir()
		t.Setenv("OUT", dir)
		subject, _ := p.SubjectForKey("alice")
		natstest.Publish(t, js, subject)
		r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--timeout", "1s", "--exec", `touch "$OUT/started"; sleep 1`)
		testutil.WaitFor(t, "the handler running", 20*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(dir, "started"))
			return err == nil
		})
		srv.Stop()
		code := r.stop(t)
		e := r.err.String()
		t.Log(stopLine(e))
		if code != 0 || strings.Contains(e, "lanes handed over") || !strings.Contains(e, "leaving the membership failed") ||
			!strings.Contains(e, "1 message in flight finished but the server did not confirm its ack") {
			t.Errorf("exit %d; the stop does not say that the server was gone:\n%s", code, e)
		}
	})
	t.Run("nothing in flight", func(t *testing.T) {
		url := natstest.Start(t).URL()
		applyDesign(t, url, "--partitions", "1")
		r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--exec", "true")
		testutil.WaitFor(t, "serving", 20*time.Second, func() bool { return strings.Contains(r.err.String(), "rebalanced") })
		if code := r.stop(t); code != 0 {
			t.Errorf("exit %d", code)
		}
		if e := r.err.String(); !strings.Contains(e, "stopped: nothing was in flight; lanes handed over") {
			t.Errorf("stop line:\n%s", e)
		}
	})
}

// stopLine is lanes work's line that says how it stopped.
func stopLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "stopped:") {
			return l
		}
	}
	return "no stop line"
}

// TestWorkNoSuchDesign: lanes work --stream S --name nosuch warns that S
// has no lanes of that design, naming those it has, and keeps running.
func TestWorkNoSuchDesign(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	applyDesign(t, url, "--partitions", "2")
	r := startWorkInProcess(t, "--stream", "ORDERS", "--name", "nosuch", "-s", url, "--exec", "true")
	testutil.WaitFor(t, "the warning, and the join", 20*time.Second, func() bool {
		return strings.Contains(r.err.String(), "no lanes of design nosuch on stream ORDERS") && strings.Contains(r.err.String(), "orders (2 lanes)") &&
			strings.Contains(r.err.String(), "in the membership") // a stop before it is an interrupted start (exit 130)
	})
	select {
	case code := <-r.code:
		t.Fatalf("exited %d: it should keep running, lanes may be applied later", code)
	default:
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestWorkPermissionDenied: a user who may do everything lanes work needs
// but pull from the lanes: the first pull is a permission violation, and
// lanes work stops with it at once (the exit code for permissions), instead
// of running on with lanes that never get a message.
func TestWorkPermissionDenied(t *testing.T) {
	cleanEnv(t)
	s := natstest.Start(t, natstest.WithUsers(
		natstest.User{Name: "admin", Password: "a"},
		natstest.User{Name: "worker", Password: "w", DenyPublish: []string{"$JS.API.CONSUMER.MSG.NEXT.ORDERS.>"}},
	))
	admin := strings.Replace(s.URL(), "nats://", "nats://admin:a@", 1)
	applyDesign(t, admin, "--partitions", "2")
	worker := strings.Replace(s.URL(), "nats://", "nats://worker:w@", 1)
	cmd, stderr := startLanes(t, workArgs("-s", worker, "--instance", "w1", "--exec", "true")...)
	started := time.Now()
	code := waitExit(t, cmd, 30*time.Second)
	if code != commands.ExitPermission || !strings.Contains(stderr.String(), "permission denied") {
		t.Fatalf("exit %d, want %d with the permission error:\n%s", code, commands.ExitPermission, stderr)
	}
	t.Logf("stopped %s after it started", time.Since(started).Round(time.Millisecond))
}

// TestWorkKeyParallel: lanes work serves a key-parallel design (applied
// with --keys-in-flight 4): eight keys on one lane run four at once, each
// key in order; the metrics show the lane's window and the status line
// says what it holds.
func TestWorkKeyParallel(t *testing.T) {
	cleanEnv(t)
	url := natstest.Start(t).URL()
	applyDesign(t, url, "--partitions", "1", "--keys-in-flight", "4")
	d := testutil.ReadDesign(t, "../examples/seed/lanes.yaml")
	d.Partitions, d.Lane.KeysInFlight = 1, 4
	p := testutil.PlanDesign(t, d)
	_, js := natstest.Connect(t, url)
	var subjects []string
	for round := 0; round < 3; round++ {
		for k := 0; k < 8; k++ {
			s, _ := p.SubjectForKey(fmt.Sprintf("user%d", k))
			subjects = append(subjects, s)
		}
	}
	natstest.Publish(t, js, subjects...)
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	addr := freeAddr(t)
	// Each handler appends its key and sequence, then waits until four
	// run at once (or ten seconds), so the first four keys meet.
	r := startWorkInProcess(t, "--stream", "ORDERS", "-s", url, "--metrics", addr, "--status-every", "100ms", "--log-format", "json",
		"--exec", `echo "$LANES_KEY $LANES_SEQ start" >> "$OUT/log"; n=0; while [ "$(grep -c start "$OUT/log")" -lt 4 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; echo "$LANES_KEY $LANES_SEQ end" >> "$OUT/log"`)
	testutil.WaitFor(t, "24 messages done", 60*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		return strings.Count(string(b), " end") == 24
	})
	body := waitMetrics(t, addr, `lanes_work_processed_total{lane="orders-n1-00",stream="ORDERS"} 24`)
	if !strings.Contains(body, `lanes_work_window{lane="orders-n1-00",stream="ORDERS"} 4`) {
		t.Errorf("metrics lack the window:\n%s", body)
	}
	testutil.WaitFor(t, "a status line with the window", 10*time.Second, func() bool { return strings.Contains(r.err.String(), `"window":"`) })
	r.stop(t)
	// Per key: start, end, start, end in stream order; four starts before
	// the first end (the keys ran at once).
	b, _ := os.ReadFile(filepath.Join(dir, "log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := map[string]string{}
	lastSeq := map[string]int{}
	firstEnd := -1
	for i, line := range lines {
		f := strings.Fields(line)
		key, what := f[0], f[2]
		seq, _ := strconv.Atoi(f[1])
		if what == "start" {
			if last[key] == "start" || seq <= lastSeq[key] {
				t.Errorf("line %d: %s started seq %d while %s (last seq %d)", i+1, key, seq, last[key], lastSeq[key])
			}
			lastSeq[key] = seq
		} else if firstEnd < 0 {
			firstEnd = i
		}
		last[key] = what
	}
	if firstEnd < 4 {
		t.Errorf("the first message ended after %d starts, want 4 keys running at once:\n%s", firstEnd, b)
	}
}

// freeAddr is a loopback address nothing listens on (for --metrics).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitMetrics reads lanes work's metrics at addr until they contain want,
// and returns them.
func waitMetrics(t *testing.T, addr, want string) string {
	t.Helper()
	var body string
	testutil.WaitFor(t, want+" in the metrics", 20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, want)
	})
	return body
}
