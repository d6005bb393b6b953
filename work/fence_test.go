package work

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

func keysOnEveryLane(t testing.TB, p *planner.Plan) []string { return ordercheck.KeysOnEveryLane(t, p) }

// judged is a handler that reports each execution to the order judge.
func judged(run *ordercheck.Run, instance string) Handler {
	return HandlerFunc(func(ctx context.Context, m *Msg) error {
		if !run.Execute(ctx, instance, m.Partition, m.Seq) {
			return ctx.Err()
		}
		return nil
	})
}

// TestCutOffOwnerNeverRunsBesideItsSuccessor is the frozen owner of the
// faults issue, cut off by a relay that holds its traffic: 8 lanes with a
// 5s ack wait, one key per lane at 8 msg/s in all, instances a and b with
// handlers of different lengths, and a cut off for 7 s (past its 5 s
// lease) while it works. Its stale writes (an ack, and the pull request
// that went with it) reach the server when the relay lets them through,
// after b took its lanes. The order judge must see every key in order
// and every message finished.
func TestCutOffOwnerNeverRunsBesideItsSuccessor(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (an owner cut off past its lease), 20s and more")
	}
	t.Parallel()
	for _, tc := range []struct{ a, b time.Duration }{{time.Second, 4 * time.Second}, {4 * time.Second, time.Second}} {
		t.Run(fmt.Sprintf("a=%s/b=%s", tc.a, tc.b), func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 8, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(5 * time.Second) })
			relay := natstest.NewRelay(t, s.Server.Addr().String())
			run := ordercheck.New(t, p, keysOnEveryLane(t, p), 5, func(instance string) time.Duration {
				return map[string]time.Duration{"a": tc.a, "b": tc.b}[instance]
			})
			cfg := func(name string) Config {
				return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name}
			}
			a := startWorker(t, "nats://"+relay.Addr(), cfg("a"), judged(run, "a"))
			b := startWorker(t, s.URL(), cfg("b"), judged(run, "b"))
			testutil.WaitFor(t, "4/4", 20*time.Second, func() bool { return settled(p, 4, 4, a, b) })

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			published := make(chan struct{})
			go func() {
				defer close(published)
				run.Publish(ctx, t, js, 125*time.Millisecond)
			}()
			testutil.WaitFor(t, "a working", 20*time.Second, func() bool { return run.Executions()["a"] >= 4 })
			relay.Freeze()
			time.Sleep(7 * time.Second) // the scenario: a cut off past its lease
			relay.Thaw()
			<-published
			testutil.WaitFor(t, "every message finished", 90*time.Second, run.Done)
			run.Check(t)
		})
	}
}

// TestCutOffOwnerHandsOverWhenBack: an owner cut off for less than its
// lease but longer than the ack wait, while a third instance joins and is
// given some of its lanes. The newcomer must not serve those lanes before
// the owner hands them over: the owner's message in flight is redelivered
// after its ack wait to whoever pulls, and the owner's stale ack and pull
// reach the server when it comes back.
func TestCutOffOwnerHandsOverWhenBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (an owner cut off past its ack wait), 15s and more")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 8, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(2 * time.Second) })
	relay := natstest.NewRelay(t, s.Server.Addr().String())
	// c is slow: it still runs the message redelivered to it when a comes
	// back (if it was given the message at all).
	run := ordercheck.New(t, p, keysOnEveryLane(t, p), 5, func(instance string) time.Duration {
		if instance == "c" {
			return 3 * time.Second
		}
		return time.Second
	})
	cfg := func(name string) Config {
		return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 10 * time.Second}
	}
	a := startWorker(t, "nats://"+relay.Addr(), cfg("a"), judged(run, "a"))
	b := startWorker(t, s.URL(), cfg("b"), judged(run, "b"))
	testutil.WaitFor(t, "4/4", 20*time.Second, func() bool { return settled(p, 4, 4, a, b) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan struct{})
	go func() {
		defer close(published)
		run.Publish(ctx, t, js, 125*time.Millisecond)
	}()
	testutil.WaitFor(t, "a working", 20*time.Second, func() bool { return run.Executions()["a"] >= 4 })
	relay.Freeze()
	frozen := time.Now()
	startWorker(t, s.URL(), cfg("c"), judged(run, "c"))
	testutil.WaitFor(t, "b to see c join", 10*time.Second, func() bool { return len(b.w.memberEpochs()) == 3 })
	time.Sleep(4*time.Second - time.Since(frozen)) // the scenario: past the ack wait, within the lease
	relay.Thaw()
	<-published
	testutil.WaitFor(t, "every message finished", 90*time.Second, run.Done)
	run.Check(t)
	if run.Executions()["c"] == 0 {
		t.Error("c never ran a message: it never got its share of the lanes")
	}
}
