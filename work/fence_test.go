package work

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/planner"
)

func TestFenceStanding(t *testing.T) {
	f := newFence(2 * time.Second)
	if got := f.check(""); got != standLapsed {
		t.Errorf("before any join: %v, want lapsed", got)
	}
	f.begin("e1", time.Now(), 2*time.Second)
	e1, lapsed1 := f.current()
	if e1 != "e1" || !f.holds("e1") || f.holds("e0") {
		t.Fatalf("after begin: epoch %q, holds e1 %v", e1, f.holds("e1"))
	}
	// A renewal sent now keeps the epoch past its first lease.
	time.Sleep(100 * time.Millisecond)
	f.extend("e1", time.Now(), 2*time.Second)
	if !f.holds("e1") {
		t.Fatal("a renewed epoch lapsed")
	}
	f.leave()
	if got := f.check("e1"); got != standLeft {
		t.Errorf("after leave: %v, want left", got)
	}
	f.begin("e2", time.Now(), 2*time.Second)
	if f.check("e1") != standLapsed || !f.holds("e2") {
		t.Errorf("a new epoch: e1 %v, e2 %v", f.check("e1"), f.check("e2"))
	}
	select {
	case <-lapsed1:
		t.Error("begin closed the old epoch's lapsed channel: lanes of e1 would take it for a lapse")
	default:
	}
	_, lapsed2 := f.current()
	f.lose()
	select {
	case <-lapsed2:
	default:
		t.Fatal("lose did not end the epoch")
	}
	if f.holds("e2") {
		t.Error("a lost epoch still holds")
	}
	f.extend("e2", time.Now(), 2*time.Second)
	if f.holds("e2") {
		t.Error("a renewal confirmed after the loss revived the epoch")
	}

	// With no renewal, the epoch lapses on its own a margin before the
	// lease: its lanes stop before the key can expire.
	f.begin("e3", time.Now(), 2*time.Second)
	_, lapsed3 := f.current()
	began := time.Now()
	select {
	case <-lapsed3:
	case <-time.After(5 * time.Second):
		t.Fatal("an unrenewed epoch did not lapse")
	}
	if took := time.Since(began); took >= 2*time.Second {
		t.Errorf("lapsed after %s: not before its 2s lease", took)
	}
	if f.check("e3") != standLapsed {
		t.Error("a lapsed epoch still holds")
	}
}

func TestMayTake(t *testing.T) {
	members := map[string]string{"a": "ea", "b": "eb2", "old": ""}
	for _, tc := range []struct {
		name   string
		rec    *LaneServer
		ok     bool
		holder string
	}{
		{"no record", nil, true, ""},
		{"handed over", &LaneServer{Instance: "a", Epoch: "ea", Released: true}, true, ""},
		{"own record", &LaneServer{Instance: "self", Epoch: "old-epoch"}, true, ""},
		{"held by a live member", &LaneServer{Instance: "a", Epoch: "ea"}, false, "a"},
		{"holder gone", &LaneServer{Instance: "c", Epoch: "ec"}, true, ""},
		{"holder joined again since", &LaneServer{Instance: "b", Epoch: "eb1"}, true, ""},
		{"an older lanes work, live", &LaneServer{Instance: "old"}, false, "old"},
		{"an older lanes work's record, holder now current", &LaneServer{Instance: "a"}, false, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, holder := mayTake(tc.rec, "self", members)
			if ok != tc.ok || holder != tc.holder {
				t.Errorf("mayTake = %v, %q; want %v, %q", ok, holder, tc.ok, tc.holder)
			}
		})
	}
}

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
	for _, tc := range []struct{ a, b time.Duration }{{time.Second, 4 * time.Second}, {4 * time.Second, time.Second}} {
		t.Run(fmt.Sprintf("a=%s/b=%s", tc.a, tc.b), func(t *testing.T) {
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
			waitFor(t, "4/4", 20*time.Second, func() bool { return settled(p, 4, 4, a, b) })

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			published := make(chan struct{})
			go func() {
				defer close(published)
				run.Publish(ctx, t, js, 125*time.Millisecond)
			}()
			waitFor(t, "a working", 20*time.Second, func() bool { return run.Executions()["a"] >= 4 })
			relay.Freeze()
			time.Sleep(7 * time.Second) // the scenario: a cut off past its lease
			relay.Thaw()
			<-published
			waitFor(t, "every message finished", 90*time.Second, run.Done)
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
	waitFor(t, "4/4", 20*time.Second, func() bool { return settled(p, 4, 4, a, b) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan struct{})
	go func() {
		defer close(published)
		run.Publish(ctx, t, js, 125*time.Millisecond)
	}()
	waitFor(t, "a working", 20*time.Second, func() bool { return run.Executions()["a"] >= 4 })
	relay.Freeze()
	frozen := time.Now()
	startWorker(t, s.URL(), cfg("c"), judged(run, "c"))
	waitFor(t, "b to see c join", 10*time.Second, func() bool { return len(b.w.memberEpochs()) == 3 })
	time.Sleep(4*time.Second - time.Since(frozen)) // the scenario: past the ack wait, within the lease
	relay.Thaw()
	<-published
	waitFor(t, "every message finished", 90*time.Second, run.Done)
	run.Check(t)
	if run.Executions()["c"] == 0 {
		t.Error("c never ran a message: it never got its share of the lanes")
	}
}
