package work

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// keyedPlan is the plan of a key-parallel design with n lanes.
func keyedPlan(t testing.TB, n, k int) *planner.Plan {
	return testutil.Plan(t, "orders", n, keysInFlight(k, 3*time.Second))
}

// TestKeyParallelOrderThroughChurn is the promise of key-parallel lanes
// through what operators do to workers, judged by the order judge: while
// messages keep coming, an instance is killed, one joins, one is stopped
// (a hand-over), one is cut off from the server past its lease and comes
// back, and lanes apply repartitions 8 -> 16 -> 8 -> 12, with K from 2 to
// 256 on a single server and K=32 on a 3-node cluster. Every key's messages must run in order, each
// after its predecessor finished, and every message must finish;
// redeliveries are allowed and counted.
func TestKeyParallelOrderThroughChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kills, a cut-off and three repartitions under load, 40s and more")
	}
	t.Parallel()
	for _, tc := range []struct {
		k       int
		cluster bool
	}{{2, false}, {32, false}, {256, false}, {32, true}} {
		k := tc.k
		name := fmt.Sprintf("K=%d", k)
		if tc.cluster {
			name += "/3-node cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// url is where the instances and the test connect; relayTo is
			// the server a's relay leads to (in a cluster, a node the
			// others do not use, so that a's cut-off is a's alone).
			var url, relayTo string
			const replicas = 1
			if tc.cluster {
				cl := natstest.StartCluster(t, 3)
				// One replica: lanes apply refuses a repartition of a
				// replicated stream's own transform while messages come
				// (its replicas switch at different moments); the
				// replicated case is TestKeyParallelOrderThroughServerFaults.
				url, relayTo = cl.Servers[1].URL()+","+cl.Servers[2].URL(), cl.Servers[0].Server.Addr().String()
			} else {
				s := natstest.Start(t)
				url, relayTo = s.URL(), s.Server.Addr().String()
			}
			keyedPlan := func(t testing.TB, n, k int) *planner.Plan {
				return testutil.Plan(t, "orders", n, keysInFlight(k, 3*time.Second), func(d *planner.Design) { d.Stream.Replicas = replicas })
			}
			_, js := natstest.Connect(t, url)
			conn, err := connect.Open(context.Background(), connect.Options{Server: url, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			apply := func(n int) {
				t.Helper()
				if _, _, err := converge.Apply(context.Background(), conn, keyedPlan(t, n, k), converge.Options{DrainTimeout: 2 * time.Minute}); err != nil {
					t.Fatalf("apply %d lanes: %v", n, err)
				}
			}
			apply(8)
			p := keyedPlan(t, 16, k) // the judge's lanes: the most the walk has
			lanesAtServer(t, js, p.Stream.Name)
			keys := make([]string, 48)
			for i := range keys {
				keys[i] = fmt.Sprintf("user%d", i)
			}
			run := ordercheck.New(t, p, keys, 60, func(string) time.Duration { return 2 * time.Millisecond })
			relay := natstest.NewRelay(t, relayTo)
			cfg := func(name string) Config {
				return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second}
			}
			a := startWorker(t, "nats://"+relay.Addr(), cfg("a"), judged(run, "a"))
			b := startWorker(t, url, cfg("b"), judged(run, "b"))
			c := startWorker(t, url, cfg("c"), judged(run, "c"))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			published := make(chan struct{})
			go func() {
				defer close(published)
				run.Publish(ctx, t, js, 10*time.Millisecond)
			}()
			total := len(run.W.Messages)
			step := func(done int, what string) {
				t.Helper()
				testutil.WaitFor(t, fmt.Sprintf("%d messages finished before: %s", done, what), time.Minute, func() bool { return run.DoneUpTo(done) })
				t.Logf("%s (%d of %d finished)", what, done, total)
			}
			step(100, "kill b")
			b.kill(t)
			d := startWorker(t, url, cfg("d"), judged(run, "d"))
			step(250, "stop c: it hands its lanes over")
			if err := c.wait(t); err != nil {
				t.Errorf("c stopped with %v", err)
			}
			step(400, "cut a off past its lease")
			relay.Freeze()
			testutil.WaitFor(t, "d serving every lane", 30*time.Second, func() bool { return settled(keyedPlan(t, 8, k), 8, 8, d) })
			relay.Thaw()
			for _, n := range []int{16, 8, 12} {
				step(min(total, run.Rec.Result().Completed+50), fmt.Sprintf("repartition to %d", n))
				apply(n)
			}
			<-published
			testutil.WaitFor(t, "every message finished", 2*time.Minute, run.Done)
			res := run.Check(t)
			t.Logf("K=%d: %d redelivered; instances ran %v", k, res.Redeliveries, run.Executions())
			_ = a
		})
	}
}

// TestKeysInFlightChangedWhileRunning: lanes apply changes keys in flight
// 1 -> 8 -> 2 -> 1 while two instances serve the lanes and messages keep
// coming. Each change is an update of the lanes (no recreate, no position
// reset); the instances follow it without a restart, and lowering K never
// lets two messages of one key run at once: the judge finds every key in
// order.
func TestKeysInFlightChangedWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three changes of keys in flight under load, 20s and more")
	}
	t.Parallel()
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.URL())
	conn, err := connect.Open(context.Background(), connect.Options{Server: s.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	apply := func(k int) {
		t.Helper()
		d, _, err := converge.Apply(context.Background(), conn, keyedPlan(t, 4, k), converge.Options{})
		if err != nil {
			t.Fatalf("apply keys in flight %d: %v", k, err)
		}
		if c := d.Counts(); c[converge.ActionRecreate] > 0 || c[converge.ActionUpdate] != 4 {
			t.Fatalf("keys in flight %d: %+v, want 4 lanes updated in place", k, c)
		}
	}
	if _, _, err := converge.Apply(context.Background(), conn, keyedPlan(t, 4, 1), converge.Options{}); err != nil {
		t.Fatal(err)
	}
	p := keyedPlan(t, 4, 1)
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%d", i)
	}
	run := ordercheck.New(t, p, keys, 50, func(string) time.Duration { return 3 * time.Millisecond })
	cfg := func(name string) Config { return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name} }
	a := startWorker(t, s.URL(), cfg("a"), judged(run, "a"))
	b := startWorker(t, s.URL(), cfg("b"), judged(run, "b"))
	testutil.WaitFor(t, "2/2", 20*time.Second, func() bool { return settled(p, 2, 2, a, b) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan struct{})
	go func() {
		defer close(published)
		run.Publish(ctx, t, js, 5*time.Millisecond)
	}()
	keyed := func(want bool) func() bool {
		return func() bool {
			n := 0
			for _, w := range []*started{a, b} {
				w.w.mu.Lock()
				for _, st := range w.w.stats {
					if st.window.Load() != nil {
						n++
					}
				}
				w.w.mu.Unlock()
			}
			return want == (n == 4)
		}
	}
	for i, k := range []int{8, 2, 1} {
		testutil.WaitFor(t, "messages before the change", time.Minute, func() bool { return run.DoneUpTo(200 * (i + 1)) })
		apply(k)
		testutil.WaitFor(t, fmt.Sprintf("the lanes served with keys in flight %d", k), 30*time.Second, keyed(k > 1))
	}
	<-published
	testutil.WaitFor(t, "every message finished", time.Minute, run.Done)
	run.Check(t)
}

// TestKeyParallelOrderThroughServerFaults: key-parallel lanes (K=16) keep
// every key in order through a server that crashes and restarts (single
// node), and through the loss and return of a cluster node with the
// stream and lanes replicated on three (their leaders move). Instance a
// reaches the server through a relay that drops what the server said
// last, as a crash does; b is connected to the others.
func TestKeyParallelOrderThroughServerFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a server restart and a cluster node lost, 30s and more")
	}
	t.Parallel()
	run := func(t *testing.T, url, relayTo string, replicas int, fault func(), recover func()) {
		_, js := natstest.Connect(t, url)
		p := testutil.Plan(t, "orders", 4, keysInFlight(16, 3*time.Second), func(d *planner.Design) { d.Stream.Replicas = replicas })
		natstest.CreateLanes(t, js, p)
		lanesAtServer(t, js, p.Stream.Name)
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = fmt.Sprintf("user%d", i)
		}
		oc := ordercheck.New(t, p, keys, 25, func(string) time.Duration { return 2 * time.Millisecond })
		relay := natstest.NewRelay(t, relayTo)
		cfg := func(name string) Config {
			return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 10 * time.Second}
		}
		a := startWorker(t, "nats://"+relay.Addr(), cfg("a"), judged(oc, "a"))
		b := startWorker(t, url, cfg("b"), judged(oc, "b"))
		testutil.WaitFor(t, "2/2", 30*time.Second, func() bool { return settled(p, 2, 2, a, b) })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		published := make(chan struct{})
		go func() {
			defer close(published)
			oc.Publish(ctx, t, js, 10*time.Millisecond)
		}()
		testutil.WaitFor(t, "300 messages finished", time.Minute, func() bool { return oc.DoneUpTo(300) })
		reconnects := a.nc.Stats().Reconnects
		relay.Freeze()
		fault()
		relay.Cut()
		testutil.WaitFor(t, "a reconnected", time.Minute, func() bool { return a.nc.Stats().Reconnects > reconnects && a.nc.IsConnected() })
		recover()
		<-published
		testutil.WaitFor(t, "every message finished", 2*time.Minute, oc.Done)
		res := oc.Check(t)
		t.Logf("%d redelivered; instances ran %v", res.Redeliveries, oc.Executions())
	}
	t.Run("server restart", func(t *testing.T) {
		s := natstest.Start(t)
		run(t, s.URL(), s.Server.Addr().String(), 1, s.Restart, func() {})
	})
	t.Run("cluster node lost and back", func(t *testing.T) {
		cl := natstest.StartCluster(t, 3)
		url := cl.Servers[1].URL() + "," + cl.Servers[2].URL()
		var up func()
		run(t, url, cl.Servers[0].Server.Addr().String(), 3, func() { up = cl.Servers[0].Down() }, func() { up() })
	})
}
