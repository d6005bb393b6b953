//go:build unix

package commands_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// The faults operators meet, on lanes work as it ships (the binary, two
// instances, an --http handler), judged by the project's order judge: a
// frozen owner (SIGSTOP), an owner cut off from the server, a hung-up
// terminal (SIGHUP), a server that crashes and comes back, a cluster node
// lost, the membership bucket deleted. In every case each key stays in
// order and every message is processed; after a reconnect every lane runs
// again within 3 s.

// faultRun is one judged run: the seed design (8 lanes, ack wait 5s), one
// key per lane, and lanes work children serving it.
type faultRun struct {
	t       *testing.T
	js      jetstream.JetStream
	p       *planner.Plan
	keys    []string
	run     *ordercheck.Run
	handler string

	mu       sync.Mutex
	children map[string]*exec.Cmd
	logs     map[string]*testutil.Buffer
}

func newFaultRun(t *testing.T, url string, perKey int, work map[string]time.Duration, applyExtra ...string) *faultRun {
	t.Helper()
	cleanEnv(t)
	p := applyDesign(t, url, append([]string{"--ack-wait", "5s"}, applyExtra...)...)
	_, js := natstest.Connect(t, url)
	keys := ordercheck.KeysOnEveryLane(t, p)
	f := &faultRun{t: t, js: js, p: p, keys: keys, children: map[string]*exec.Cmd{}, logs: map[string]*testutil.Buffer{}}
	f.run = ordercheck.New(t, p, keys, perKey, func(instance string) time.Duration { return work[instance] })
	f.handler = f.run.Handler(t)
	t.Cleanup(func() {
		if t.Failed() {
			for name, cmd := range f.children {
				cmd.Process.Kill()
				cmd.Wait()
				t.Logf("%s stderr:\n%s", name, f.logs[name])
			}
		}
	})
	return f
}

// start runs lanes work as instance name, connected to url.
func (f *faultRun) start(name, url string) *exec.Cmd {
	cmd, stderr := startLanes(f.t, workArgs("-s", url, "--http", f.handler, "--instance", name, "--status-every", "5s", "--verbose")...)
	f.mu.Lock()
	f.children[name], f.logs[name] = cmd, stderr
	f.mu.Unlock()
	return cmd
}

// spread waits until the membership says every lane is served, by each
// named instance for some.
func (f *faultRun) spread(names ...string) {
	f.t.Helper()
	testutil.WaitFor(f.t, fmt.Sprintf("the lanes spread over %v", names), 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sv, err := membership.ReadServing(ctx, f.js, f.p.Stream.Name, f.p.Design.Name)
		if err != nil {
			return false
		}
		per := map[string]int{}
		for _, l := range f.p.Lanes {
			ls, ok := sv.Lanes[l.Name]
			if !ok || ls.Gone {
				return false
			}
			per[ls.Instance]++
		}
		for _, n := range names {
			if per[n] == 0 {
				return false
			}
		}
		return true
	})
}

// serving waits until every named instance has run a message.
func (f *faultRun) serving(names ...string) {
	f.t.Helper()
	testutil.WaitFor(f.t, fmt.Sprintf("%v running messages", names), 30*time.Second, func() bool {
		ex := f.run.Executions()
		for _, n := range names {
			if ex[n] == 0 {
				return false
			}
		}
		return true
	})
}

// publish publishes the run's messages at 8 per second in the background.
func (f *faultRun) publish() (wait func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run.Publish(ctx, f.t, f.js, 125*time.Millisecond)
	}()
	f.t.Cleanup(cancel)
	return func() { <-done }
}

// finish waits for every message, judges the run, and stops the named
// instances with SIGTERM (exit 0).
func (f *faultRun) finish(stop ...string) {
	f.t.Helper()
	testutil.WaitFor(f.t, "every message processed", 120*time.Second, f.run.Done)
	f.run.Check(f.t)
	for _, name := range stop {
		if code := stopChild(f.t, f.children[name], syscall.SIGTERM, 30*time.Second); code != 0 {
			f.t.Errorf("%s: SIGTERM: exit %d, want 0", name, code)
		}
	}
}

// reconnected waits until n lanes work instances are connected to the
// servers.
func reconnected(t *testing.T, n int, servers ...*natstest.Server) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d lanes work instances connected", n), 30*time.Second, func() bool {
		got := 0
		for _, s := range servers {
			cz, err := s.Server.Connz(&server.ConnzOptions{})
			if err != nil {
				return false
			}
			for _, c := range cz.Conns {
				if strings.HasPrefix(c.Name, "lanes-work-") {
					got++
				}
			}
		}
		return got >= n
	})
}

// afterDisruption publishes the second half of the run (one message per
// key when perKey is 2) at once, once the workers have reconnected, and
// fails when a lane took 3 s or more to begin its message.
func (f *faultRun) afterDisruption() {
	f.t.Helper()
	half := len(f.run.W.Messages) / 2
	published := time.Now()
	f.run.PublishRange(context.Background(), f.t, f.js, half, len(f.run.W.Messages), 0)
	testutil.WaitFor(f.t, "every message processed", 60*time.Second, f.run.Done)
	worst := time.Duration(0)
	for msg, d := range f.run.Stalls(half, len(f.run.W.Messages), published) {
		worst = max(worst, d)
		if d >= 3*time.Second {
			f.t.Errorf("message %d (key %s) began %s after it was published: a lane stalled after the reconnect", msg+1, f.keys[f.run.W.Messages[msg].Key], d.Round(time.Millisecond))
		}
	}
	f.t.Logf("slowest lane after the reconnect: %s", worst.Round(time.Millisecond))
}

// beforeDisruption publishes the first half of the run and waits until
// it is processed.
func (f *faultRun) beforeDisruption() {
	f.t.Helper()
	half := len(f.run.W.Messages) / 2
	f.run.PublishRange(context.Background(), f.t, f.js, 0, half, 0)
	testutil.WaitFor(f.t, "the first half processed", 60*time.Second, func() bool { return f.run.DoneUpTo(half) })
}

func TestWorkFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the faults take a few minutes")
	}
	for _, h := range []struct{ a, b time.Duration }{{time.Second, 4 * time.Second}, {4 * time.Second, time.Second}} {
		name := fmt.Sprintf("a=%s,b=%s", h.a, h.b)
		t.Run("frozen owner/"+name, func(t *testing.T) {
			url := natstest.Start(t).URL()
			f := newFaultRun(t, url, 5, map[string]time.Duration{"a": h.a, "b": h.b})
			a := f.start("a", url)
			f.start("b", url)
			wait := f.publish()
			f.serving("a", "b")
			testutil.WaitFor(t, "a working", 30*time.Second, func() bool { return f.run.Executions()["a"] >= 4 })
			a.Process.Signal(syscall.SIGSTOP)
			time.Sleep(7 * time.Second) // the scenario: a frozen past its 5s lease
			a.Process.Signal(syscall.SIGCONT)
			wait()
			f.finish("a", "b")
		})
		t.Run("cut-off owner/"+name, func(t *testing.T) {
			s := natstest.Start(t)
			relay := natstest.NewRelay(t, s.Server.Addr().String())
			f := newFaultRun(t, s.URL(), 5, map[string]time.Duration{"a": h.a, "b": h.b})
			f.start("a", "nats://"+relay.Addr())
			f.start("b", s.URL())
			wait := f.publish()
			f.serving("a", "b")
			testutil.WaitFor(t, "a working", 30*time.Second, func() bool { return f.run.Executions()["a"] >= 4 })
			relay.Freeze()
			time.Sleep(7 * time.Second) // the scenario: a cut off past its 5s lease
			relay.Thaw()
			wait()
			f.finish("a", "b")
		})
	}
	t.Run("SIGHUP", func(t *testing.T) {
		url := natstest.Start(t).URL()
		f := newFaultRun(t, url, 5, map[string]time.Duration{"a": 200 * time.Millisecond, "b": 200 * time.Millisecond})
		a := f.start("a", url)
		f.start("b", url)
		wait := f.publish()
		f.serving("a", "b")
		hungUp := time.Now()
		if code := stopChild(t, a, syscall.SIGHUP, 30*time.Second); code != 0 {
			t.Errorf("a: SIGHUP: exit %d, want 0 (a stop that hands the lanes over)", code)
		}
		if took := time.Since(hungUp); took > 10*time.Second {
			t.Errorf("a took %s to stop on SIGHUP", took)
		}
		wait()
		f.finish("b")
	})
	t.Run("server crash", func(t *testing.T) {
		s := natstest.Start(t)
		relay := natstest.NewRelay(t, s.Server.Addr().String())
		f := newFaultRun(t, s.URL(), 2, map[string]time.Duration{"a": 20 * time.Millisecond, "b": 20 * time.Millisecond})
		f.start("a", "nats://"+relay.Addr())
		f.start("b", "nats://"+relay.Addr())
		f.spread("a", "b")
		f.beforeDisruption()
		// The server stops and starts again; the workers never see its
		// last words (a crash, not a stop).
		relay.Freeze()
		s.Restart()
		relay.Cut()
		_, f.js = natstest.Connect(t, s.URL())
		reconnected(t, 2, s)
		f.afterDisruption()
		f.finish("a", "b")
	})
	t.Run("cluster node lost", func(t *testing.T) {
		cl := natstest.StartCluster(t, 3)
		relay := natstest.NewRelay(t, cl.Servers[0].Server.Addr().String())
		f := newFaultRun(t, cl.Servers[1].URL()+","+cl.Servers[2].URL(), 2, map[string]time.Duration{"a": 20 * time.Millisecond, "b": 20 * time.Millisecond}, "--replicas", "3")
		// Through the relay to node 0 only: the other nodes are learned
		// from the cluster, for the reconnect.
		f.start("a", "nats://"+relay.Addr())
		f.start("b", "nats://"+relay.Addr())
		f.spread("a", "b")
		f.beforeDisruption()
		relay.Freeze()
		cl.Servers[0].Stop()
		// The workers learn of the loss after the new leaders told the
		// pull requests they knew of, where nobody listened.
		testutil.WaitFor(t, "every lane with a leader again", 60*time.Second, func() bool {
			for _, l := range f.p.Lanes {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				c, err := f.js.Consumer(ctx, f.p.Stream.Name, l.Name)
				cancel()
				if err != nil || c.CachedInfo().Cluster == nil || c.CachedInfo().Cluster.Leader == "" {
					return false
				}
			}
			return true
		})
		relay.Cut()
		reconnected(t, 2, cl.Servers[1], cl.Servers[2])
		f.afterDisruption()
		f.finish("a", "b")
	})
	t.Run("membership bucket deleted", func(t *testing.T) {
		url := natstest.Start(t).URL()
		f := newFaultRun(t, url, 8, map[string]time.Duration{"a": 50 * time.Millisecond, "b": 50 * time.Millisecond})
		f.start("a", url)
		f.start("b", url)
		wait := f.publish()
		f.serving("a", "b")
		if err := f.js.DeleteKeyValue(context.Background(), "lanes_work"); err != nil {
			t.Fatal(err)
		}
		wait()
		testutil.WaitFor(t, "both instances members of the new bucket", 30*time.Second, func() bool { return members(t, url) == 2 })
		f.finish("a", "b")
	})
}
