package model_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// keyed is one key-parallel lane setting: K keys in flight, which the
// planner pins with max ack pending K.
func keyed(ackWait time.Duration, k int) model.Lane {
	return model.Lane{AckWait: ackWait, MaxDeliver: -1, MaxAckPending: k, KeysInFlight: k, Pinned: true, PinnedTTL: 2 * time.Minute}
}

func recorder(t *testing.T, w *workload.Workload, cfg model.Config) *judge.Recorder {
	t.Helper()
	rec, err := model.RunRecorder(context.Background(), w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// doneBefore counts the messages completed before at.
func doneBefore(rec *judge.Recorder, w *workload.Workload, at time.Duration) int {
	n := 0
	for i := range w.Messages {
		if d, ok := rec.DoneAt(i); ok && d < at {
			n++
		}
	}
	return n
}

// keys_in_flight 1 (or unset) is today's serial lane: the same result,
// figure for figure, whatever else the lane does (workers, crashes,
// backoff, max deliver, pins, in-progress acks, slow handlers).
func TestKeysInFlightOneIsTheSerialLane(t *testing.T) {
	base := workload.Spec{Keys: keys(40), Messages: 600, Process: workload.Process{Kind: "exp", Mean: 20 * ms}, Crash: 0.1, Seed: 5}
	lanes := map[string]model.Lane{
		"plain":         lane(30 * time.Second),
		"slow handlers": lane(25 * ms),
		"backoff":       {AckWait: 50 * ms, BackOff: []time.Duration{50 * ms, 200 * ms}, MaxDeliver: 3, MaxAckPending: 1},
		"pinned":        {AckWait: 100 * ms, MaxDeliver: -1, MaxAckPending: 1, Pinned: true, PinnedTTL: time.Second},
	}
	for name, l := range lanes {
		for _, workers := range []int{1, 2} {
			for _, progress := range []bool{false, true} {
				w := generate(t, base)
				cfg := model.Config{Strategy: strategy.Lanes, Partitions: 8, WorkersPerLane: workers, KeyPartition: modulo(40, 8), Lane: l, InProgress: progress}
				unset := run(t, w, cfg)
				cfg.Lane.KeysInFlight = 1
				if one := run(t, w, cfg); !reflect.DeepEqual(one, unset) {
					t.Errorf("%s, %d workers, in-progress %v: keys in flight 1 gives\n%+v\nunset gives\n%+v", name, workers, progress, one, unset)
				}
				if unset.Crashes == 0 || unset.KeysInFlight != 0 {
					t.Errorf("%s: %d crashes, keys in flight %d: the case shows nothing", name, unset.Crashes, unset.KeysInFlight)
				}
			}
		}
	}
}

// The first benchmark: one lane, K=32, 1,000 keys, a 1ms
// handler. The owner runs 32 distinct keys at once, so a backlog drains
// at exactly 32/t, 32x the serial lane, with every slot busy.
func TestKeyParallelLaneRunsKKeysAtOnce(t *testing.T) {
	w := roundRobin(t, 1000, 4, workload.Spec{Process: fixed(ms), Seed: 1})
	cfg := model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: make([]int, 1000), Lane: lane(30 * time.Second)}
	serial := run(t, w, cfg)
	cfg.Lane = keyed(30*time.Second, 32)
	par := run(t, w, cfg)
	if !near(serial.Throughput, 1000, 1e-9) || !near(par.Throughput, 32000, 1e-9) {
		t.Fatalf("throughput serial %.1f/s, K=32 %.1f/s; want 1000/s and 32000/s", serial.Throughput, par.Throughput)
	}
	if par.OrderViolations != 0 || par.Duplicates != 0 || par.Completed != 4000 || !par.FinalStateCorrect {
		t.Fatalf("K=32: %+v", par)
	}
	if par.KeysInFlight != 32 || par.Lanes[0].Utilization != 1 || par.Lanes[0].PeakBacklog != 4000 {
		t.Fatalf("K=32: keys in flight %d, lane %+v; want 32, fully busy, peak backlog 4000", par.KeysInFlight, par.Lanes[0])
	}
	// 8 lanes of K=4 hold the same 32 keys in flight.
	cfg.Partitions, cfg.KeyPartition, cfg.Lane = 8, modulo(1000, 8), keyed(30*time.Second, 4)
	if got := run(t, w, cfg).Throughput; !near(got, 32000, 1e-9) {
		t.Fatalf("8 lanes x K=4: %.1f/s, want 32000/s", got)
	}
}

// What K does not change: one hot key is one message at a time.
func TestOneHotKeyIsStillSerial(t *testing.T) {
	w := roundRobin(t, 1, 300, workload.Spec{Process: fixed(2 * ms), Seed: 1})
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 2, KeyPartition: []int{0}, Lane: keyed(30*time.Second, 64)})
	if !near(res.Throughput, 500, 1e-9) || res.OrderViolations != 0 {
		t.Fatalf("one key on a K=64 lane: %.1f/s, %d violations; want 500/s (1/t), 0", res.Throughput, res.OrderViolations)
	}
	if u := res.Lanes[0].Utilization; !near(u, 1.0/64, 1e-9) {
		t.Fatalf("utilization %.4f, want 1/64: one slot of the window busy", u)
	}
}

// Per-key order holds on key-parallel lanes whatever fails: crashes
// (redelivered after the ack wait, holding their key meanwhile), handlers
// that outlive their ack wait without in-progress acks (the owner does
// not run the redelivered copy beside them), several workers per lane
// (only the pinned owner receives), skewed keys, arrivals at a rate.
func TestKeyParallelLanesKeepOrder(t *testing.T) {
	cases := []struct {
		name     string
		spec     workload.Spec
		ackWait  time.Duration
		progress bool
	}{
		{"crashes", workload.Spec{Keys: keys(50), Messages: 2000, Process: workload.Process{Kind: "exp", Mean: 5 * ms}, Crash: 0.05, Seed: 3}, 40 * ms, false},
		{"slow handlers", workload.Spec{Keys: keys(20), Messages: 400, Process: fixed(80 * ms), Seed: 4}, 50 * ms, false},
		{"slow handlers, in-progress acks", workload.Spec{Keys: keys(20), Messages: 400, Process: fixed(80 * ms), Crash: 0.05, Seed: 4}, 50 * ms, true},
		{"paced, skewed", workload.Spec{Keys: workload.Keys{Names: []string{"a", "b", "c"}, Subjects: []string{"s.a", "s.b", "s.c"}, Weights: []float64{8, 1, 1}}, Messages: 600, Rate: 300, Process: fixed(2 * ms), Crash: 0.02, Seed: 6}, 20 * ms, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := generate(t, tc.spec)
			n := len(tc.spec.Keys.Names)
			res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 2, WorkersPerLane: 2, KeyPartition: modulo(n, 2), Lane: keyed(tc.ackWait, 8), InProgress: tc.progress})
			if res.OrderViolations != 0 || res.Duplicates != 0 || res.Completed != res.Messages || !res.FinalStateCorrect {
				t.Fatalf("%+v", res)
			}
			if tc.spec.Crash > 0 && (res.Crashes == 0 || res.Executions != res.Messages+res.Crashes) {
				t.Fatalf("crashes %d, executions %d for %d messages: each crash is one more execution", res.Crashes, res.Executions, res.Messages)
			}
		})
	}
	// Without the gate, max ack pending 8 on the same lanes breaks order.
	w := generate(t, cases[0].spec)
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 2, WorkersPerLane: 8, KeyPartition: modulo(50, 2),
		Lane: model.Lane{AckWait: 40 * ms, MaxDeliver: -1, MaxAckPending: 8}})
	if res.OrderViolations == 0 {
		t.Fatal("max ack pending 8 without the key gate keeps order: the test shows nothing")
	}
}

// A failing key holds only its own messages, until they fill the window.
// One lane, keys k0..k3 in turn, 10 messages each, a 1ms handler, ack wait
// 100ms; k0's first message fails once and comes back at 100ms.
//   - K=1: the lane waits for it: nothing completes before 100ms.
//   - K=4: k1..k3 go on while k0's later messages arrive and wait, each
//     holding a slot; at 6ms k0 holds all four (its failed message and
//     three waiting): the lane stops. 9 messages completed before 100ms.
//   - K=64: the window never fills: all 30 of k1..k3 are done by 10ms, and
//     k0 runs its 10 back to back from 100ms to 110ms.
func TestFailingKeyFillsTheWindow(t *testing.T) {
	spec := workload.Spec{Process: fixed(ms), Failing: workload.Failing{Key: "k0", Attempts: 1}, Seed: 1}
	w := roundRobin(t, 4, 10, spec)
	for _, tc := range []struct {
		k, before int
		drain     time.Duration
	}{{1, 0, 0}, {4, 9, 0}, {64, 30, 110 * ms}} {
		l := keyed(100*ms, tc.k)
		if tc.k == 1 {
			l = lane(100 * ms)
		}
		cfg := model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: make([]int, 4), Lane: l}
		rec := recorder(t, w, cfg)
		res := rec.Result()
		if got := doneBefore(rec, w, 100*ms); got != tc.before {
			t.Errorf("K=%d: %d messages completed before the failed one came back, want %d", tc.k, got, tc.before)
		}
		if res.OrderViolations != 0 || res.Completed != 40 || res.Crashes != 1 {
			t.Errorf("K=%d: %+v", tc.k, res)
		}
		if tc.drain > 0 && res.DrainSeconds != tc.drain.Seconds() {
			t.Errorf("K=%d: drained in %.3fs, want %s", tc.k, res.DrainSeconds, tc.drain)
		}
	}
	// On K=4 the window is k0's from 6ms: the 9th completion is at 6ms and
	// the 10th is k0's first message, at 101ms.
	rec := recorder(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: make([]int, 4), Lane: keyed(100*ms, 4)})
	if n := doneBefore(rec, w, 7*ms); n != 9 {
		t.Errorf("K=4: %d done by 7ms, want 9", n)
	}
	if d, _ := rec.DoneAt(0); d != 101*ms {
		t.Errorf("K=4: the failing message completed at %s, want 101ms", d)
	}
	if n := doneBefore(rec, w, 101*ms); n != 9 {
		t.Errorf("K=4: %d done before 101ms, want 9: the full window held every key", n)
	}
}

// Max deliver drops a key's failing message: the key goes on with its
// next message, the order judge counts the skipped one.
func TestDroppedMessageFreesItsKey(t *testing.T) {
	spec := workload.Spec{Process: fixed(ms), Failing: workload.Failing{Key: "k0", Attempts: 5}, Seed: 1}
	w := roundRobin(t, 2, 5, spec)
	l := keyed(10*ms, 4)
	l.MaxDeliver = 2
	res := run(t, w, model.Config{Strategy: strategy.Lanes, Partitions: 1, WorkersPerLane: 1, KeyPartition: make([]int, 2), Lane: l})
	if res.Unfinished != 1 || res.Completed != 9 || res.Crashes != 2 || res.OrderViolations != 1 {
		t.Fatalf("%+v; want k0's first message dropped after 2 failed deliveries, the other 9 done, 1 violation (its successor ran without it)", res)
	}
}
