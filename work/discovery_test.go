package work

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestCountCheckListsOnlyOnChange: between full listings a worker asks
// the server for the stream's consumer count only; the same count lists
// nothing, a lane more lists again and finds it.
func TestCountCheckListsOnlyOnChange(t *testing.T) {
	t.Parallel()
	_, _, js, p := setup(t, "orders", 2)
	w, err := New(js, Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", Relist: time.Hour},
		HandlerFunc(func(context.Context, *Msg) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.stopFollowingApplies()
	ctx := context.Background()
	if err := w.listLanes(ctx); err != nil {
		t.Fatal(err)
	}
	listedAt := func() time.Time {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.listedAt
	}
	first := listedAt()
	if err := w.checkLanes(ctx); err != nil {
		t.Fatal(err)
	}
	if !listedAt().Equal(first) {
		t.Fatal("the same consumer count listed the lanes again")
	}

	more := testutil.Plan(t, "orders", 3) // a lane of another generation
	var cfg jetstream.ConsumerConfig
	natstest.Convert(t, more.Consumers[0], &cfg)
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.checkLanes(ctx); err != nil {
		t.Fatal(err)
	}
	if listedAt().Equal(first) {
		t.Fatal("a consumer more did not list the lanes again")
	}
	w.mu.Lock()
	_, found := w.lanes[cfg.Durable]
	w.mu.Unlock()
	if !found {
		t.Fatalf("the new lane %s was not found by the listing", cfg.Durable)
	}
}

// TestApplyLockReleaseFollowsChangedSettings: a lane's settings changed
// under apply's lock (no advisory says so) reach a running worker when
// the lock is released, long before its next full listing.
func TestApplyLockReleaseFollowsChangedSettings(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	conn := connect.Around(js, 5*time.Second)
	ctx := context.Background()
	lock := func() *converge.Lock {
		l, err := converge.AcquireLock(ctx, conn, p.Stream.Name, converge.LockOwner{Command: "test"}, converge.LockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if err := lock().Release(ctx); err != nil { // the bucket exists, as after any apply
		t.Fatal(err)
	}
	a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", Relist: time.Hour},
		HandlerFunc(func(context.Context, *Msg) error { return nil }))
	var cfg jetstream.ConsumerConfig
	natstest.Convert(t, p.Consumers[0], &cfg)
	lane := cfg.Durable
	ackWait := func() time.Duration {
		a.w.mu.Lock()
		defer a.w.mu.Unlock()
		if l := a.w.lanes[lane]; l != nil {
			return l.ackWait
		}
		return 0
	}
	testutil.WaitFor(t, "the lane listed", 10*time.Second, func() bool { return ackWait() > 0 })
	if ackWait() == 7*time.Second {
		t.Fatal("the lane has the changed ack wait before the change")
	}

	l := lock()
	cfg.AckWait = 7 * time.Second
	if _, err := js.UpdateConsumer(ctx, p.Stream.Name, cfg); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the changed ack wait followed", 10*time.Second, func() bool { return ackWait() == 7*time.Second })
}

// TestPaceStretchesWithLanes: an idle request's heartbeat is what the
// configured expiry gives up to 640 lanes, then grows with the lanes
// served so that an instance asks the server for heartbeatBudget a second
// at most; the expiry stays five heartbeats or more (the server refuses a
// heartbeat over half the expiry).
func TestPaceStretchesWithLanes(t *testing.T) {
	for _, tc := range []struct {
		lanes             int
		expiry, heartbeat time.Duration
	}{
		{0, 30 * time.Second, 5 * time.Second},
		{16, 30 * time.Second, 5 * time.Second},
		{640, 30 * time.Second, 5 * time.Second},
		{1024, 40 * time.Second, 8 * time.Second},
		{4096, 160 * time.Second, 32 * time.Second},
		{16384, 640 * time.Second, 128 * time.Second},
	} {
		expiry, hb := pace(DefaultPullExpiry, tc.lanes)
		if expiry != tc.expiry || hb != tc.heartbeat {
			t.Errorf("%d lanes: expiry %s, heartbeat %s; want %s, %s", tc.lanes, expiry, hb, tc.expiry, tc.heartbeat)
		}
		if perSecond := float64(tc.lanes) / hb.Seconds(); perSecond > heartbeatBudget {
			t.Errorf("%d lanes: %.0f heartbeats a second, over the budget", tc.lanes, perSecond)
		}
	}
	if expiry, hb := pace(3*time.Second, 10); expiry != 3*time.Second || hb != time.Second || 2*hb > expiry {
		t.Errorf("a short expiry: %s, heartbeat %s", expiry, hb)
	}
}

// TestOlderRequestEndIsNotTheCurrentOnes: the 408 of a request asked
// again as it ended (ensure) does not end the newer one; the newer one's
// own 408 does.
func TestOlderRequestEndIsNotTheCurrentOnes(t *testing.T) {
	timeout := &nats.Msg{Subject: "_INBOX.x.p", Header: nats.Header{"Status": []string{"408"}}}
	p := &puller{ackPrefix: "_INBOX.x.a", outstanding: true, expiry: 30 * time.Second, expires: time.Now().Add(29 * time.Second)}
	if ev := p.note(timeout); ev != evHeartbeat || !p.outstanding {
		t.Errorf("an older request's 408: event %v, outstanding %v; want a heartbeat, still outstanding", ev, p.outstanding)
	}
	p.expires = time.Now()
	if ev := p.note(timeout); ev != evEnded || p.outstanding {
		t.Errorf("the current request's 408: event %v, outstanding %v; want ended", ev, p.outstanding)
	}
}

// TestStandingRequestShorterThanAckDeadline: a busy serial lane's
// standing request ends within half the ack deadline, so that a frozen
// holder's request takes at most one message in with it.
func TestStandingRequestShorterThanAckDeadline(t *testing.T) {
	for _, ackWait := range []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Hour} {
		d := busyFor(&laneInfo{ackWait: ackWait})
		if d > max(ackWait/2, 500*time.Millisecond) || d > 10*time.Second || d < 500*time.Millisecond {
			t.Errorf("ack wait %s: a standing request of %s", ackWait, d)
		}
	}
}

// TestManyLanesTakenFromASnapshot: an instance taking snapshotFrom lanes
// or more reads their records in one go; every lane is served, and a
// second instance then takes its share from the first's hand-overs.
func TestManyLanesTakenFromASnapshot(t *testing.T) {
	t.Parallel()
	const lanes = 2 * snapshotFrom
	s, _, _, p := setup(t, "orders", lanes)
	h := HandlerFunc(func(context.Context, *Msg) error { return nil })
	a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, h)
	testutil.WaitFor(t, "every lane taken by a", time.Minute, func() bool { return a.w.Stats().Serving == lanes })
	b := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "b"}, h)
	testutil.WaitFor(t, "the lanes split between a and b", time.Minute, func() bool {
		return settled(p, lanes/2, lanes/2, a, b) && a.w.Stats().Serving+b.w.Stats().Serving == lanes
	})
}

// TestLaneRecreatedIsServedAgain: a lane deleted and created again under
// the same name (a repartition back to an earlier partition count) before
// the worker's next listing is served again. Before, the worker kept it
// as deleted for as long as listings found it, and served it never.
func TestLaneRecreatedIsServedAgain(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	var rec recorder
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, rec.handler("a", nil))
	publishKeys(t, js, p, 1, 1)
	testutil.WaitFor(t, "the first message handled", 20*time.Second, func() bool { return len(rec.seqs()) == 1 })

	ctx := context.Background()
	lane := p.Lanes[0].Name
	if err := js.DeleteConsumer(ctx, p.Stream.Name, lane); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the worker told the lane was deleted", 20*time.Second, func() bool {
		w.w.mu.Lock()
		defer w.w.mu.Unlock()
		_, deleted := w.w.deletedLanes[lane]
		return deleted
	})
	var cfg jetstream.ConsumerConfig
	natstest.Convert(t, p.Consumers[0], &cfg)
	cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, 2
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, cfg); err != nil {
		t.Fatal(err)
	}
	publishKeys(t, js, p, 1, 1)
	testutil.WaitFor(t, "the recreated lane's message handled", 30*time.Second, func() bool { return len(rec.seqs()) == 2 })
}
