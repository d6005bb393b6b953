package work

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// firstRuns records when each lane first ran a message after a moment.
type firstRuns struct {
	mu    sync.Mutex
	after time.Time
	at    map[string]time.Time
}

func (f *firstRuns) handler() Handler {
	return HandlerFunc(func(ctx context.Context, m *Msg) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.after.IsZero() && f.at[m.Lane].IsZero() {
			f.at[m.Lane] = time.Now()
		}
		return nil
	})
}

func (f *firstRuns) reset(after time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after, f.at = after, map[string]time.Time{}
}

func (f *firstRuns) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.at)
}

// stalls: how long after published each lane ran its first message.
func (f *firstRuns) stalls(published time.Time) map[string]time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]time.Duration{}
	for lane, at := range f.at {
		out[lane] = at.Sub(published)
	}
	return out
}

// publishOnEveryLane publishes one message for each of keys.
func publishOnEveryLane(t testing.TB, js jetstream.JetStream, p *planner.Plan, keys []string) {
	t.Helper()
	for _, k := range keys {
		s, _ := p.SubjectForKey(k)
		natstest.Publish(t, js, s)
	}
}

// checkStalls fails when a lane took limit or more to run a message
// published after the disruption.
func checkStalls(t testing.TB, stalls map[string]time.Duration, limit time.Duration) {
	t.Helper()
	worst := time.Duration(0)
	for lane, d := range stalls {
		worst = max(worst, d)
		if d >= limit {
			t.Errorf("lane %s ran its first message %s after it was published: want under %s", lane, d.Round(time.Millisecond), limit)
		}
	}
	t.Logf("slowest lane to resume: %s", worst.Round(time.Millisecond))
}

// TestServerRestartResumesEveryLane: after a server restart every lane
// pulls again as soon as the worker has reconnected, not three missed
// heartbeats later (about 17 s, when 2 to 5 of 8 lanes stayed idle). The
// server crashes: the worker's connection goes through a relay that drops
// what the server said last (a stopping server tells pull requests
// "409 Server Shutdown", which a crash does not).
func TestServerRestartResumesEveryLane(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the server restarts)")
	}
	s, _, _, p := setup(t, "orders", 8)
	relay := natstest.NewRelay(t, s.Server.Addr().String())
	keys := keysOnEveryLane(t, p)
	runs := &firstRuns{}
	// A lease that outlives the restart: the lanes are not restarted by
	// the instance joining again, only by what follows the reconnect.
	a := startWorker(t, "nats://"+relay.Addr(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", Lease: 30 * time.Second}, runs.handler())
	testutil.WaitFor(t, "a serving 8 lanes", 20*time.Second, func() bool { return settled(p, 8, 8, a) })
	runs.reset(time.Now())
	_, js := natstest.Connect(t, s.URL())
	publishOnEveryLane(t, js, p, keys)
	testutil.WaitFor(t, "every lane running", 20*time.Second, func() bool { return runs.count() == 8 })

	reconnects := a.nc.Stats().Reconnects
	relay.Freeze()
	s.Restart()
	relay.Cut()
	testutil.WaitFor(t, "a reconnected", 30*time.Second, func() bool { return a.nc.Stats().Reconnects > reconnects && a.nc.IsConnected() })
	_, js = natstest.Connect(t, s.URL())
	published := time.Now()
	runs.reset(published)
	publishOnEveryLane(t, js, p, keys)
	testutil.WaitFor(t, "every lane running after the restart", 30*time.Second, func() bool { return runs.count() == 8 })
	checkStalls(t, runs.stalls(published), 3*time.Second)
}

// TestClusterNodeLossResumesEveryLane: a cluster node crashes while the
// worker is connected to it (through a relay that drops what the node
// said last): the lanes whose consumer leader it was get a new leader, the
// pull requests that waited there or came through it are lost, and every
// lane asks again at once after the reconnect to another node (and when
// its consumer's new leader is elected).
func TestClusterNodeLossResumesEveryLane(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster losing a node")
	}
	cl := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, cl.Servers[1].URL()+","+cl.Servers[2].URL())
	p := testutil.Plan(t, "orders", 8, func(d *planner.Design) { d.Stream.Replicas = 3 })
	natstest.CreateLanes(t, js, p)
	keys := keysOnEveryLane(t, p)
	relay := natstest.NewRelay(t, cl.Servers[0].Server.Addr().String())
	runs := &firstRuns{}
	// Through the relay only: the other nodes are learned from the
	// cluster, for the reconnect.
	a := startWorker(t, "nats://"+relay.Addr(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", Lease: 30 * time.Second}, runs.handler())
	testutil.WaitFor(t, "a serving 8 lanes", 30*time.Second, func() bool { return settled(p, 8, 8, a) })
	runs.reset(time.Now())
	publishOnEveryLane(t, js, p, keys)
	testutil.WaitFor(t, "every lane running", 20*time.Second, func() bool { return runs.count() == 8 })

	relay.Freeze()
	cl.Servers[0].Stop()
	// The worker learns of the loss only after the new leaders told the
	// requests they knew of (409 Leadership Change) where nobody listened.
	defer relay.Cut()
	testutil.WaitFor(t, "every lane with a leader again", 60*time.Second, func() bool {
		for _, l := range p.Lanes {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := js.Consumer(ctx, p.Stream.Name, l.Name)
			cancel()
			if err != nil || c.CachedInfo().Cluster == nil || c.CachedInfo().Cluster.Leader == "" {
				return false
			}
		}
		return true
	})
	reconnects := a.nc.Stats().Reconnects
	relay.Cut()
	testutil.WaitFor(t, "a reconnected", 30*time.Second, func() bool { return a.nc.Stats().Reconnects > reconnects && a.nc.IsConnected() })
	published := time.Now()
	runs.reset(published)
	publishOnEveryLane(t, js, p, keys)
	testutil.WaitFor(t, "every lane running after the node loss", 30*time.Second, func() bool { return runs.count() == 8 })
	checkStalls(t, runs.stalls(published), 3*time.Second)
}

// TestBucketDeletedWhileRunning: the membership bucket deleted under two
// running instances is recreated, and they go on serving every lane, in
// order, instead of exiting about 20 s later.
func TestBucketDeletedWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the membership bucket deleted under the workers)")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 8)
	run := ordercheck.New(t, p, keysOnEveryLane(t, p), 8, func(string) time.Duration { return 50 * time.Millisecond })
	cfg := func(name string) Config {
		return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second}
	}
	a := startWorker(t, s.URL(), cfg("a"), judged(run, "a"))
	b := startWorker(t, s.URL(), cfg("b"), judged(run, "b"))
	testutil.WaitFor(t, "4/4", 20*time.Second, func() bool { return settled(p, 4, 4, a, b) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan struct{})
	go func() {
		defer close(published)
		run.Publish(ctx, t, js, 100*time.Millisecond)
	}()
	testutil.WaitFor(t, "some messages done", 20*time.Second, func() bool { return run.Executions()["a"]+run.Executions()["b"] >= 8 })
	if err := js.DeleteKeyValue(ctx, membership.Bucket); err != nil {
		t.Fatal(err)
	}
	<-published
	testutil.WaitFor(t, "every message finished", 60*time.Second, run.Done)
	run.Check(t)
	for _, w := range []*started{a, b} {
		select {
		case err := <-w.err:
			t.Fatalf("instance %s stopped: %v", w.w.cfg.Instance, err)
		default:
		}
	}
	if _, err := js.KeyValue(ctx, membership.Bucket); err != nil {
		t.Errorf("the bucket was not recreated: %v", err)
	}
	testutil.WaitFor(t, "both instances members of the new bucket", 20*time.Second, func() bool {
		sv, err := membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
		return err == nil && len(sv.Members) == 2
	})
}

// TestAcrossADomain: an instance connected to a leaf node serves lanes
// of the hub's JetStream domain (jetstream.NewWithDomain): its pulls,
// acks, lease renewals and lane records all reach the hub. Its lease must
// hold (a renewal published on a bare $KV subject reached the leaf's
// JetStream, found no bucket, and the instance lost its lease every few
// seconds), and every message is processed in order.
func TestAcrossADomain(t *testing.T) {
	hub, leaf := natstest.StartLeaf(t)
	_, hubJS := natstest.Connect(t, hub.URL())
	p := testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, hubJS, p)
	run := ordercheck.New(t, p, keysOnEveryLane(t, p), 10, func(string) time.Duration { return time.Millisecond })

	nc, err := nats.Connect(leaf.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	w, err := New(js, Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "leafy", Lease: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, judged(run, "leafy"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ended; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	run.Publish(ctx, t, hubJS, 20*time.Millisecond)
	testutil.WaitFor(t, "every message processed", 30*time.Second, run.Done)
	run.Check(t)
	// Several renewals (every 2s/3) have passed; none may have failed.
	began := time.Now()
	testutil.WaitFor(t, "three renewals", 10*time.Second, func() bool { return time.Since(began) > 2*time.Second })
	if l := logs.String(); strings.Contains(l, "lease lost") || strings.Contains(l, "cannot renew") {
		t.Errorf("the lease did not hold across the domain:\n%s", l)
	}
	sv, err := membership.ReadServing(ctx, hubJS, p.Stream.Name, p.Design.Name)
	if err != nil || len(sv.Members) != 1 || sv.Members[0].Instance != "leafy" {
		t.Fatalf("members in the hub's bucket: %+v, %v", sv, err)
	}
	for _, l := range p.Lanes {
		if r := sv.Lanes[l.Name]; r.Instance != "leafy" || r.Gone {
			t.Errorf("lane %s record %+v", l.Name, r)
		}
	}
}
