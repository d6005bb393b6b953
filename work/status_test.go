package work

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
)

// TestReadServing: the read side inspect uses. It names the instance
// serving each lane and since when, the live members, and the instances
// gone (lease expired, or left), and marks lanes whose instance is gone.
func TestReadServing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: instances gone by a lease expiry, 4s")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 4)
	ctx := context.Background()
	sv, err := membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
	if err != nil || len(sv.Members) != 0 || len(sv.Lanes) != 0 {
		t.Fatalf("before any worker: %+v, %v", sv, err)
	}
	cfg := func(name string) Config {
		return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second}
	}
	before := time.Now()
	a := startWorker(t, s.URL(), cfg("a"), HandlerFunc(func(context.Context, *Msg) error { return nil }))
	b := startWorker(t, s.URL(), cfg("b"), HandlerFunc(func(context.Context, *Msg) error { return nil }))
	testutil.WaitFor(t, "2/2", 10*time.Second, func() bool { return settled(p, 2, 2, a, b) })
	testutil.WaitFor(t, "the bucket to say the same", 5*time.Second, func() bool {
		sv, err = membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
		if err != nil || len(sv.Members) != 2 || len(sv.Lanes) != 4 {
			return false
		}
		for name, owner := range serving(a, b) {
			if sv.Lanes[name].Instance != owner[0] || sv.Lanes[name].Gone || sv.Lanes[name].Since.Before(before.Add(-time.Second)) {
				return false
			}
		}
		return true
	})
	if sv.Members[0].Instance != "a" || sv.Members[0].PID == 0 || sv.Members[0].Started.IsZero() {
		t.Errorf("members: %+v", sv.Members)
	}

	b.kill(t)
	testutil.WaitFor(t, "b gone, its lanes served by a", 10*time.Second, func() bool {
		sv, err = membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
		if err != nil || len(sv.Members) != 1 || len(sv.Gone) != 1 {
			return false
		}
		for _, l := range p.Lanes {
			if sv.Lanes[l.Name].Instance != "a" {
				return false
			}
		}
		return true
	})
	if g := sv.Gone[0]; g.Instance != "b" || !g.Expired {
		t.Errorf("gone: %+v, want b, expired", g)
	}

	a.kill(t)
	testutil.WaitFor(t, "every lane's instance gone", 10*time.Second, func() bool {
		sv, err = membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
		if err != nil || len(sv.Members) != 0 {
			return false
		}
		for _, l := range p.Lanes {
			if !sv.Lanes[l.Name].Gone {
				return false
			}
		}
		return true
	})

	// A stop (not a death) shows as left, not expired.
	c := startWorker(t, s.URL(), cfg("c"), HandlerFunc(func(context.Context, *Msg) error { return nil }))
	testutil.WaitFor(t, "c serves", 10*time.Second, func() bool { return settled(p, 4, 4, c) })
	c.wait(t)
	sv, err = membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range sv.Gone {
		if g.Instance == "c" && g.Expired {
			t.Errorf("c left on a stop but shows as expired")
		}
	}
	_ = natstest.Start
}

// TestLaneRecordSaysWhatRuns: a lane's record says how far the lane got
// (the last message acked: processed_seq) and, while a message runs far
// longer than the lane's usual time, which one and since when; a stop
// marks it handed over with its last position.
func TestLaneRecordSaysWhatRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a message must run past SlowAfter (10s) to be recorded")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	ctx := context.Background()
	release := make(chan struct{})
	a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		HandlerFunc(func(ctx context.Context, m *Msg) error {
			if m.Seq == 3 {
				select { // a handler that hangs
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		}))
	testutil.WaitFor(t, "a serves", 10*time.Second, func() bool { return settled(p, 1, 1, a) })
	lane := p.Lanes[0].Name
	record := func() membership.LaneServer {
		sv, err := membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
		if err != nil {
			t.Fatal(err)
		}
		return sv.Lanes[lane]
	}
	publishKeys(t, js, p, 1, 2)
	testutil.WaitFor(t, "processed_seq 1 or 2", 10*time.Second, func() bool { return record().Processed >= 1 })
	began := time.Now()
	publishKeys(t, js, p, 1, 1)
	testutil.WaitFor(t, "the long message in the record", 30*time.Second, func() bool { return record().InFlight != nil })
	in := record().InFlight
	if in.Seq != 3 || in.Attempt != 1 || time.Since(in.Since) < SlowAfter(0) || in.Since.Before(began.Add(-time.Second)) {
		t.Errorf("in flight: %+v (recorded %s after it began)", in, time.Since(began))
	}
	close(release)
	testutil.WaitFor(t, "the long message out of the record", 10*time.Second, func() bool { return record().InFlight == nil })
	if err := a.wait(t); err != nil {
		t.Fatal(err)
	}
	if r := record(); !r.Released || !r.Gone || r.Processed != 3 || r.Instance != "a" {
		t.Errorf("after the stop: %+v, want released by a at processed_seq 3", r)
	}
}
