package commands_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// workBuffer is written by a running command and read by the test.
type workBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *workBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *workBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runningWork is lanes work run in-process until stop.
type runningWork struct {
	out, err workBuffer
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
	d, err := planner.ParseDesign(mustRead(t, "../examples/seed/lanes.yaml"), "lanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(extra); i++ {
		if extra[i] == "--partitions" {
			d.Partitions, _ = strconv.Atoi(extra[i+1])
		}
	}
	p, err := planner.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
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
	} {
		code, out, errs := lanes(t, tc.args...)
		if code != commands.ExitUsage || !strings.Contains(errs, tc.say) || out != "" || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d (want 2), stderr %q (want one line with %q), stdout %q", tc.args, code, errs, tc.say, out)
		}
	}
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
			if tc.cluster {
				cl := natstest.StartCluster(t, 3)
				url = cl.URLs()
				applyExtra = append(applyExtra, "--replicas", "3", "--pinned")
			} else {
				url = natstest.Start(t).URL()
			}
			p := applyDesign(t, url, applyExtra...)
			_, js := natstest.Connect(t, url)
			rec := newCallRecorder(t, 3*time.Millisecond)
			var children []*exec.Cmd
			for i := 0; i < tc.instances; i++ {
				cmd, stderr := startLanes(t, workArgs("-s", url, "--http", rec.URL, "--instance", fmt.Sprintf("w%d", i), "--lease", "2s")...)
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
			waitForCond(t, "every instance serving", 20*time.Second, func() bool {
				return len(instancesServing(rec.snapshot(), start)) == tc.instances
			})
			children[0].Process.Kill()
			killed := time.Now()
			waitExit(t, children[0], 5*time.Second)
			time.Sleep(5 * time.Second) // the lease (2s) and the ack wait (2s) pass while publishing goes on
			n := pub.finish()
			waitForCond(t, fmt.Sprintf("%d messages processed", n), 30*time.Second, func() bool { return rec.distinct() >= n })
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
