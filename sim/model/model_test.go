package model_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

const ms = time.Millisecond

// keys makes n equally weighted keys k0..k(n-1).
func keys(n int) workload.Keys {
	k := workload.Keys{}
	for i := range n {
		name := fmt.Sprintf("k%d", i)
		k.Add(name, "s."+name, 1)
	}
	return k
}

func fixed(d time.Duration) workload.Process { return workload.Process{Kind: "fixed", Mean: d} }

// roundRobin publishes n messages per key, keys in turn.
func roundRobin(t *testing.T, nkeys, perKey int, spec workload.Spec) *workload.Workload {
	t.Helper()
	spec.Keys = keys(nkeys)
	order := make([]int, 0, nkeys*perKey)
	for range perKey {
		for k := range nkeys {
			order = append(order, k)
		}
	}
	w, err := workload.Sequence(spec, order)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func generate(t *testing.T, spec workload.Spec) *workload.Workload {
	t.Helper()
	w, err := workload.Generate(spec)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// identity puts key k in partition k mod p.
func modulo(nkeys, p int) []int {
	out := make([]int, nkeys)
	for k := range out {
		out[k] = k % p
	}
	return out
}

func lane(ackWait time.Duration) model.Lane {
	return model.Lane{AckWait: ackWait, MaxDeliver: -1, MaxAckPending: 1}
}

func run(t *testing.T, w *workload.Workload, cfg model.Config) judge.Result {
	t.Helper()
	res, err := model.Run(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// One serial lane with fixed processing time t drains at exactly 1/t, and
// message i of a backlog waits (i+1)t.
func TestOneLaneThroughputIsOneOverT(t *testing.T) {
	w := roundRobin(t, 1, 200, workload.Spec{Process: fixed(10 * ms), Seed: 1})
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: []int{0}, Lane: lane(30 * time.Second)})
	if !near(res.Throughput, 100, 1e-9) {
		t.Fatalf("throughput %.4f/s, want 100/s (1/10ms)", res.Throughput)
	}
	if res.LatencyMaxms != 2000 || res.LatencyP50ms != 1000 || res.DrainSeconds != 2 {
		t.Fatalf("latency p50 %.1fms max %.1fms drain %.2fs, want 1000ms, 2000ms, 2s", res.LatencyP50ms, res.LatencyMaxms, res.DrainSeconds)
	}
	if res.Lanes[0].Utilization != 1 || res.Lanes[0].PeakBacklog != 200 {
		t.Fatalf("lane %+v, want fully busy with a peak backlog of 200", res.Lanes[0])
	}
}

// P equally loaded lanes drain at exactly P/t; single, with the same P
// workers, stays at 1/t because MaxAckPending=1 serializes them.
func TestEquallyLoadedLanesGivePOverT(t *testing.T) {
	for _, p := range []int{2, 8, 64} {
		w := roundRobin(t, p, 50, workload.Spec{Process: fixed(10 * ms), Seed: 1})
		cfg := model.Config{Strategy: strategy.Lanes, Partitions: p, WorkersPerLane: 1, KeyPartition: modulo(p, p), Lane: lane(30 * time.Second)}
		if got := run(t, w, cfg).Throughput; !near(got, float64(p)*100, 1e-9) {
			t.Errorf("%d lanes: throughput %.3f/s, want %d/s", p, got, p*100)
		}
		cfg.Strategy = strategy.Single
		if got := run(t, w, cfg).Throughput; !near(got, 100, 1e-9) {
			t.Errorf("single with %d workers: throughput %.3f/s, want 100/s", p, got)
		}
		cfg.Strategy = strategy.Unordered
		if got := run(t, w, cfg).Throughput; !near(got, float64(p)*100, 1e-9) {
			t.Errorf("unordered with %d workers: throughput %.3f/s, want %d/s", p, got, p*100)
		}
	}
}

// A key that carries most of the traffic caps its lane: the backlog drains
// when the hottest lane has done its n messages, n*t, whatever the number
// of partitions.
func TestHotKeyCapsItsLane(t *testing.T) {
	k := keys(10)
	k.Weights[0] = 9 // k0: half the traffic
	w := generate(t, workload.Spec{Keys: k, Messages: 4000, Process: fixed(ms), Seed: 3})
	perKey := make([]int, 10)
	for _, m := range w.Messages {
		perKey[m.Key]++
	}
	hot := float64(perKey[0])
	want := float64(len(w.Messages)) / (hot * 0.001) // N / (n_hot * t)
	for _, p := range []int{10, 64} {
		res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: p, WorkersPerLane: 1, KeyPartition: modulo(10, p), Lane: lane(30 * time.Second)})
		if !near(res.Throughput, want, 1e-9) {
			t.Errorf("%d lanes: throughput %.2f/s, want N/(n_hot t) = %.2f/s", p, res.Throughput, want)
		}
		if res.HottestLane != 0 || res.HottestKey != "k0" || res.Lanes[0].Utilization != 1 {
			t.Errorf("%d lanes: hottest lane %d key %s utilization %.2f, want lane 0, k0, 1.0", p, res.HottestLane, res.HottestKey, res.Lanes[0].Utilization)
		}
	}
}

// Below capacity, evenly spaced arrivals never queue: every message waits
// exactly its processing time, and throughput follows the arrival rate.
func TestBelowCapacityLatencyIsProcessingTime(t *testing.T) {
	w := roundRobin(t, 4, 250, workload.Spec{Rate: 200, Process: fixed(4 * ms), Seed: 1})
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 4, WorkersPerLane: 1, KeyPartition: modulo(4, 4), Lane: lane(30 * time.Second)})
	if res.LatencyP50ms != 4 || res.LatencyMaxms != 4 {
		t.Fatalf("latency p50 %.2fms max %.2fms, want 4ms", res.LatencyP50ms, res.LatencyMaxms)
	}
	// N messages over (N-1)/R + t
	want := 1000 / (999.0/200 + 0.004)
	if !near(res.Throughput, want, 1e-9) {
		t.Fatalf("throughput %.3f/s, want %.3f/s", res.Throughput, want)
	}
}

func TestLanesKeepOrderUnorderedDoesNot(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(20), Messages: 3000, Process: workload.Process{Kind: "exp", Mean: 10 * ms}, Seed: 7})
	cfg := model.Config{Partitions: 8, WorkersPerLane: 2, KeyPartition: modulo(20, 8), Lane: lane(30 * time.Second)}
	cfg.Strategy = strategy.Lanes
	if res := run(t, w, cfg); res.OrderViolations != 0 || res.Duplicates != 0 || !res.FinalStateCorrect {
		t.Fatalf("lanes: %d violations, %d duplicates, final state right=%v; want 0, 0, true", res.OrderViolations, res.Duplicates, res.FinalStateCorrect)
	}
	cfg.Strategy = strategy.Unordered
	if res := run(t, w, cfg); res.OrderViolations == 0 {
		t.Fatal("unordered: no order violations with 16 workers on 20 keys")
	}
}

// MaxAckPending above 1 lets a lane hand out a key's next message while
// its predecessor runs: the planner warns, the model shows it.
func TestLaneWithMaxAckPendingAboveOneBreaksOrder(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(4), Messages: 2000, Process: workload.Process{Kind: "exp", Mean: 10 * ms}, Seed: 2})
	l := lane(30 * time.Second)
	l.MaxAckPending = 4
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 2, WorkersPerLane: 4, KeyPartition: modulo(4, 2), Lane: l})
	if res.OrderViolations == 0 {
		t.Fatal("max ack pending 4 with 4 workers per lane kept order: it cannot")
	}
}

// Processing time longer than the ack wait, two workers per lane: the
// message is redelivered to the idle worker, the first worker's late ack is
// accepted and the lane moves on while the copy still runs. In-progress acks
// keep the message with its worker.
func TestSlowWorkIsRedeliveredUnlessInProgress(t *testing.T) {
	w := roundRobin(t, 4, 50, workload.Spec{Process: fixed(100 * ms), Seed: 1})
	cfg := model.Config{Strategy: strategy.Lanes, Partitions: 4, WorkersPerLane: 2, KeyPartition: modulo(4, 4), Lane: lane(60 * ms)}
	res := run(t, w, cfg)
	if res.Duplicates == 0 || res.Redeliveries == 0 || res.OrderViolations == 0 {
		t.Fatalf("ack wait 60ms < 100ms work: duplicates %d, redeliveries %d, violations %d; want all > 0", res.Duplicates, res.Redeliveries, res.OrderViolations)
	}
	cfg.InProgress = true
	res = run(t, w, cfg)
	if res.Duplicates != 0 || res.Redeliveries != 0 || res.OrderViolations != 0 || res.Executions != 200 {
		t.Fatalf("with in-progress acks: duplicates %d, redeliveries %d, violations %d, executions %d; want 0, 0, 0, 200",
			res.Duplicates, res.Redeliveries, res.OrderViolations, res.Executions)
	}
	// One worker per lane: no idle worker to redeliver to, the late ack wins.
	cfg.InProgress, cfg.WorkersPerLane = false, 1
	if res := run(t, w, cfg); res.Duplicates != 0 || res.Executions != 200 {
		t.Fatalf("one worker per lane: duplicates %d executions %d, want 0 and 200", res.Duplicates, res.Executions)
	}
}

// A crash is redelivered after the ack wait; with unlimited max deliver
// nothing is lost and lanes still keep order.
func TestCrashesAreRedeliveredNotLost(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(30), Messages: 2000, Process: fixed(5 * ms), Crash: 0.1, Seed: 11})
	cfg := model.Config{Strategy: strategy.Lanes, Partitions: 8, WorkersPerLane: 1, KeyPartition: modulo(30, 8), Lane: lane(50 * ms)}
	res := run(t, w, cfg)
	if res.Crashes < 100 || res.Redeliveries < res.Crashes || res.Unfinished != 0 || res.Completed != 2000 {
		t.Fatalf("crashes %d redeliveries %d unfinished %d completed %d; want ~200 crashes, as many redeliveries, none lost",
			res.Crashes, res.Redeliveries, res.Unfinished, res.Completed)
	}
	if res.OrderViolations != 0 || res.Duplicates != 0 || !res.FinalStateCorrect {
		t.Fatalf("crashes broke a lane: %d violations %d duplicates, final state right=%v", res.OrderViolations, res.Duplicates, res.FinalStateCorrect)
	}
	if res.LatencyMaxms < 50 {
		t.Fatalf("a crashed message waits the 50ms ack wait; max latency %.1fms", res.LatencyMaxms)
	}
}

// With max deliver 1 a message whose only attempt crashed is dropped: it
// is never completed, and the lane moves on.
func TestMaxDeliverDropsCrashedMessages(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(10), Messages: 1000, Process: fixed(5 * ms), Crash: 0.2, Seed: 5})
	crashed := 0
	for i := range w.Messages {
		if _, crash := w.Attempt(i, 1); crash {
			crashed++
		}
	}
	l := lane(20 * ms)
	l.MaxDeliver = 1
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 4, WorkersPerLane: 1, KeyPartition: modulo(10, 4), Lane: l})
	if crashed == 0 || res.Unfinished != crashed || res.Redeliveries != 0 {
		t.Fatalf("unfinished %d redeliveries %d, want %d first-attempt crashes dropped and no redelivery", res.Unfinished, res.Redeliveries, crashed)
	}
}

// Unordered workers apply a key's updates in whatever order they finish:
// the store can end on a stale value. A version-checked store drops stale
// updates and ends right. Seed 4 is one where unordered ends wrong.
func TestVersionedEndsRightWhereUnorderedDoesNot(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(3), Messages: 300, Process: workload.Process{Kind: "exp", Mean: 10 * ms}, Seed: 4})
	cfg := model.Config{Partitions: 8, WorkersPerLane: 1, Lane: lane(30 * time.Second)}
	cfg.Strategy = strategy.Unordered
	if res := run(t, w, cfg); res.FinalStateCorrect {
		t.Fatal("unordered ended with the right final state for seed 4")
	}
	cfg.Strategy = strategy.Versioned
	res := run(t, w, cfg)
	if !res.FinalStateCorrect || res.StaleDropped == 0 {
		t.Fatalf("versioned: final state right=%v, %d stale updates dropped; want true and some", res.FinalStateCorrect, res.StaleDropped)
	}
}

// A pinned lane has one active worker: no overlap even with a spare worker
// and a short ack wait. When the pinned worker dies, the lane waits for the
// pin to move (PinnedTTL), then the spare takes over.
func TestPinnedLaneFailsOverAfterTTL(t *testing.T) {
	w := roundRobin(t, 1, 400, workload.Spec{Process: fixed(5 * ms), Crash: 0.02, Seed: 9})
	l := lane(50 * ms)
	l.Pinned, l.PinnedTTL = true, 500*ms
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 2, KeyPartition: []int{0}, Lane: l})
	if res.Crashes == 0 {
		t.Fatal("seed 9 gave no crash; pick another")
	}
	if res.Duplicates != 0 || res.OrderViolations != 0 || res.Unfinished != 0 {
		t.Fatalf("pinned lane: %d duplicates %d violations %d unfinished, want none", res.Duplicates, res.OrderViolations, res.Unfinished)
	}
	if res.LatencyMaxms < 500 {
		t.Fatalf("max latency %.0fms: after a crash the lane must wait for the pin to move (500ms)", res.LatencyMaxms)
	}
	l.Pinned = false
	if free := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 2, KeyPartition: []int{0}, Lane: l}); free.LatencyMaxms >= res.LatencyMaxms {
		t.Fatalf("unpinned max latency %.0fms not below pinned %.0fms", free.LatencyMaxms, res.LatencyMaxms)
	}
}

func TestSameSeedSameResult(t *testing.T) {
	spec := workload.Spec{Keys: keys(50), Messages: 3000, Rate: 2000, Process: workload.Process{Kind: "lognormal", P50: 5 * ms, P99: 60 * ms}, Crash: 0.05, Seed: 42}
	cfg := model.Config{Strategy: strategy.Lanes, Partitions: 8, WorkersPerLane: 2, KeyPartition: modulo(50, 8), Lane: lane(40 * ms)}
	a := run(t, generate(t, spec), cfg)
	b := run(t, generate(t, spec), cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	spec.Seed = 43
	if c := run(t, generate(t, spec), cfg); reflect.DeepEqual(a, c) {
		t.Fatal("a different seed gave the identical result")
	}
}

func TestRejectsBadConfig(t *testing.T) {
	w := roundRobin(t, 2, 1, workload.Spec{Process: fixed(ms)})
	good := model.Config{Strategy: strategy.Lanes, Partitions: 2, WorkersPerLane: 1, KeyPartition: []int{0, 1}, Lane: lane(ms)}
	bad := map[string]func(*model.Config){
		"mechanics":  func(c *model.Config) { c.Strategy.Model = "teleport" },
		"partitions": func(c *model.Config) { c.Partitions = 0 },
		"workers":    func(c *model.Config) { c.WorkersPerLane = 0 },
		"ack wait":   func(c *model.Config) { c.Lane.AckWait = 0 },
		"key part":   func(c *model.Config) { c.KeyPartition = []int{0, 2} },
		"key count":  func(c *model.Config) { c.KeyPartition = []int{0} },
		"pinned ttl": func(c *model.Config) { c.Lane.Pinned = true },
	}
	if _, err := model.Run(context.Background(), w, good); err != nil {
		t.Fatal(err)
	}
	for name, f := range bad {
		c := good
		f(&c)
		if _, err := model.Run(context.Background(), w, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStopsWhenCancelled(t *testing.T) {
	w := generate(t, workload.Spec{Keys: keys(10), Messages: 200_000, Process: fixed(ms), Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := model.Run(ctx, w, model.Config{Strategy: strategy.Single, Partitions: 1, WorkersPerLane: 1, Lane: lane(time.Second)}); err == nil {
		t.Fatal("a cancelled run returned no error")
	}
}

// crashingFirst is one message whose first n attempts crash and whose next
// one succeeds, each working for d.
func crashingFirst(t *testing.T, d time.Duration, n int) *workload.Workload {
	t.Helper()
	spec := workload.Spec{Keys: keys(1), Process: fixed(d), Crash: 0.5}
	for seed := uint64(1); seed < 1000; seed++ {
		spec.Seed = seed
		w, _ := workload.Sequence(spec, []int{0})
		ok := true
		for a := 1; a <= n+1; a++ {
			_, crash := w.Attempt(0, a)
			ok = ok && crash == (a <= n)
		}
		if ok {
			return w
		}
	}
	t.Fatalf("no seed below 1000 crashes %d times then succeeds", n)
	return nil
}

// BackOff sets the wait after each delivery: a message whose first two
// attempts crash is delivered at 0, BackOff[0] and BackOff[0]+BackOff[1].
func TestBackoffSpacesRedeliveries(t *testing.T) {
	w := crashingFirst(t, 5*ms, 2)
	l := lane(20 * ms)
	l.BackOff = []time.Duration{20 * ms, 200 * ms}
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: []int{0}, Lane: l})
	if res.LatencyMaxms != 225 || res.Crashes != 2 || res.Redeliveries != 2 {
		t.Fatalf("latency %.1fms crashes %d redeliveries %d, want 20ms+200ms+5ms = 225ms, 2, 2", res.LatencyMaxms, res.Crashes, res.Redeliveries)
	}
}

// Every registered strategy runs in the model: the registry names no
// mechanics the model lacks.
func TestEveryRegisteredStrategyRuns(t *testing.T) {
	w := roundRobin(t, 4, 5, workload.Spec{Process: fixed(ms), Seed: 1})
	for _, s := range strategy.All {
		res := run(t, w, model.Config{Strategy: s, Partitions: 2, WorkersPerLane: 1, KeyPartition: modulo(4, 2), Lane: lane(time.Second),
			Lease: strategy.LeaseSettings{TTL: time.Second, Retry: ms}})
		if res.Strategy != s.Name || res.Completed != 20 {
			t.Errorf("%s: %+v", s.Name, res)
		}
	}
}
