package model_test

import (
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

func leaseConfig(partitions int, keyPartition []int, ttl, retry, rtt time.Duration) model.Config {
	return model.Config{Strategy: strategy.KVLease, Partitions: partitions, WorkersPerLane: 1, KeyPartition: keyPartition,
		Lane: lane(30 * time.Second), Lease: strategy.LeaseSettings{TTL: ttl, Retry: retry}, RoundTrip: rtt}
}

// With a key per worker there is no contention: a message costs its work
// plus the lease's round trips, jetstream's Create and the release: one
// and one the first time a key is leased, three and one after (Create
// finds the release's delete marker, reads it, writes again). n rounds of
// W keys end at (n-1)(t+4r) + t + r.
func TestLeaseRoundTrips(t *testing.T) {
	const workers, rounds = 4, 50
	work, rtt := 10*ms, ms
	w := roundRobin(t, workers, rounds, workload.Spec{Process: fixed(work), Seed: 1})
	res := run(t, w, leaseConfig(workers, modulo(workers, workers), 30*time.Second, ms, rtt))
	drain := time.Duration(rounds-1)*(work+4*rtt) + work + rtt
	want := float64(workers*rounds) / drain.Seconds()
	if !near(res.Throughput, want, 1e-9) || res.OrderViolations != 0 || res.LeaseRetries != 0 || !res.FinalStateCorrect {
		t.Fatalf("throughput %.3f/s (want %.3f/s), violations %d, retries %d, final state right %v",
			res.Throughput, want, res.OrderViolations, res.LeaseRetries, res.FinalStateCorrect)
	}
	if res.Partitions != 1 || res.WorkersPerLane != workers {
		t.Fatalf("kv-lease is one shared consumer: %d x %d", res.Partitions, res.WorkersPerLane)
	}
}

// A lease that lapses mid-job (work 1.5s, TTL 1s, no renewal without
// in-progress acks) lets the key's next message, retried every 100ms, take
// it at 1s and start beside the first: an order violation; each finds its
// lease gone when it releases. With in-progress acks the holder renews the
// lease and the next message waits for the release.
func TestLeaseExpiresMidJob(t *testing.T) {
	w := roundRobin(t, 1, 2, workload.Spec{Process: fixed(1500 * ms), Seed: 1})
	cfg := leaseConfig(2, []int{0}, time.Second, 100*ms, 0)
	res := run(t, w, cfg)
	if res.OrderViolations != 1 || res.LeasesLost != 2 || res.LeaseRetries != 10 || res.DrainSeconds != 2.5 || !res.FinalStateCorrect {
		t.Fatalf("lapsed: violations %d, lost %d, retries %d, drain %.2fs, final state right %v; want 1, 2, 10, 2.5s, true",
			res.OrderViolations, res.LeasesLost, res.LeaseRetries, res.DrainSeconds, res.FinalStateCorrect)
	}
	cfg.InProgress = true
	res = run(t, w, cfg)
	if res.OrderViolations != 0 || res.LeasesLost != 0 || res.LeaseRetries != 15 || res.DrainSeconds != 3 {
		t.Fatalf("renewed: violations %d, lost %d, retries %d, drain %.2fs; want 0, 0, 15, 3s",
			res.OrderViolations, res.LeasesLost, res.LeaseRetries, res.DrainSeconds)
	}
}

// When a lapsed lease's holder finishes after the lease's next holder
// wrote, the fenced store refuses its write: the final state stays right
// although the key's messages overlapped.
func TestLeaseFencingRefusesTheLapsedHolder(t *testing.T) {
	spec := workload.Spec{Keys: keys(3), Messages: 60, Process: workload.Process{Kind: "exp", Mean: 1500 * ms}, Seed: 5}
	w := generate(t, spec)
	res := run(t, w, leaseConfig(3, modulo(3, 3), time.Second, 50*ms, 0))
	if res.OrderViolations == 0 || res.LeasesLost == 0 || res.StaleDropped == 0 {
		t.Fatalf("violations %d, lost %d, refused %d: want all above 0", res.OrderViolations, res.LeasesLost, res.StaleDropped)
	}
}

// A hot key: kv-lease wins when the lanes strategy puts other keys behind
// it in its lane (the lease holds only the hot key; other keys run on the
// other workers), at the cost of lease retries: each delivery of the hot
// key while it is leased is naked and comes back. With one key only, the
// key is serial either way and kv-lease loses to the naks and round trips.
func TestLeaseUnderAHotKey(t *testing.T) {
	k := workload.Keys{}
	k.Add("hot", "s.hot", 30)
	for i := range 60 {
		name := "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		k.Add(name, "s."+name, 1)
	}
	w := generate(t, workload.Spec{Keys: k, Messages: 3000, Process: fixed(10 * ms), Seed: 1})
	parts := modulo(len(k.Names), 8) // the hot key shares lane 0 with 7 others
	lanesCfg := model.Config{Strategy: strategy.Lanes, Partitions: 8, WorkersPerLane: 1, KeyPartition: parts, Lane: lane(30 * time.Second)}
	lanes := run(t, w, lanesCfg)
	lease := run(t, w, leaseConfig(8, parts, 30*time.Second, 5*ms, 200*time.Microsecond))
	if lease.Throughput <= lanes.Throughput || lease.LeaseRetries == 0 {
		t.Fatalf("hot key sharing a lane: kv-lease %.1f/s (%d retries), lanes %.1f/s: want kv-lease ahead, with retries",
			lease.Throughput, lease.LeaseRetries, lanes.Throughput)
	}
	t.Logf("hot key sharing a lane: kv-lease %.1f/s (%d retries, %d violations), lanes %.1f/s", lease.Throughput, lease.LeaseRetries, lease.OrderViolations, lanes.Throughput)

	one := roundRobin(t, 1, 200, workload.Spec{Process: fixed(10 * ms), Seed: 1})
	lanesCfg.KeyPartition = []int{0}
	lanes = run(t, one, lanesCfg)
	lease = run(t, one, leaseConfig(8, []int{0}, 30*time.Second, 5*ms, 200*time.Microsecond))
	if lease.Throughput >= lanes.Throughput || lease.LeaseRetries == 0 || !near(lanes.Throughput, 100, 1e-9) {
		t.Fatalf("one key: kv-lease %.1f/s (%d retries), lanes %.1f/s: want kv-lease behind", lease.Throughput, lease.LeaseRetries, lanes.Throughput)
	}
}

// A crashed holder keeps its key's lease until it lapses, one TTL after its
// last renewal: the message's redelivery (after the 200ms ack wait) finds
// the key leased and waits about a TTL.
func TestLeaseCrashedHolderBlocksItsKey(t *testing.T) {
	w := crashingFirst(t, 50*ms, 1)
	cfg := leaseConfig(2, []int{0}, time.Second, 100*ms, 0)
	cfg.Lane.AckWait = 200 * ms
	cfg.InProgress = true
	res := run(t, w, cfg)
	if res.Crashes != 1 || res.Completed != 1 || res.LatencyMaxms < 1000 || res.LeaseRetries == 0 {
		t.Fatalf("crashes %d, completed %d, latency %.0fms, retries %d: want the redelivery to wait out the lease",
			res.Crashes, res.Completed, res.LatencyMaxms, res.LeaseRetries)
	}
}
