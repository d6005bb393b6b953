package judge_test

import (
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/workload"
)

// twoKeys: messages 0,2 are key a; 1,3 are key b (publish order a b a b).
func twoKeys(t *testing.T) *workload.Workload {
	t.Helper()
	w, err := workload.Generate(workload.Spec{
		Keys:     workload.Keys{Names: []string{"a", "b"}, Subjects: []string{"s.a", "s.b"}, Weights: []float64{1, 1}},
		Messages: 40, Process: workload.Process{Kind: "fixed", Mean: time.Millisecond}, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func oneLane(int) int { return 0 }

// byKey returns the message indices of one key, in publish order.
func byKey(w *workload.Workload, key int) []int {
	var out []int
	for i, m := range w.Messages {
		if m.Key == key {
			out = append(out, i)
		}
	}
	return out
}

func TestSerialRunHasNoViolations(t *testing.T) {
	w := twoKeys(t)
	r := judge.New(w, "single", 1, 1, oneLane, judge.Plain)
	at := time.Duration(0)
	for i := range w.Messages {
		e := r.Begin(i, 0, at)
		at += time.Millisecond
		r.End(e, at, judge.Done)
	}
	res := r.Result()
	if res.OrderViolations != 0 || res.Duplicates != 0 || !res.FinalStateCorrect || res.Completed != 40 {
		t.Fatalf("serial run judged %+v", res)
	}
	if res.Throughput < 999 || res.Throughput > 1001 {
		t.Fatalf("throughput %.1f, want 1000/s for 1ms each", res.Throughput)
	}
}

// A successor starting while its predecessor runs is caught, and a late
// duplicate of the predecessor leaves the wrong final state.
func TestCatchesOverlapAndStaleDuplicate(t *testing.T) {
	w := twoKeys(t)
	a := byKey(w, 0)
	if len(a) < 2 {
		t.Skip("seed gave fewer than two messages for key a")
	}
	r := judge.New(w, "unordered", 1, 2, oneLane, judge.Plain)
	for i := range w.Messages {
		if i == a[0] || i == a[1] {
			continue
		}
		// everything else runs serially, far in the future
		e := r.Begin(i, 0, time.Hour)
		r.End(e, time.Hour, judge.Done)
	}
	first := r.Begin(a[0], 0, 0)
	second := r.Begin(a[1], 0, time.Millisecond) // predecessor not finished: violation
	r.End(second, 2*time.Millisecond, judge.Done)
	r.End(first, 3*time.Millisecond, judge.Done) // applied after its successor
	res := r.Result()
	if res.OrderViolations < 1 {
		t.Fatalf("overlap not caught: %+v", res)
	}
	if a[1] == w.LastOfKey(0) && res.FinalStateCorrect {
		t.Fatalf("an older update applied last must leave the wrong state")
	}
}

func TestVersionedStoreDropsStaleAndEndsRight(t *testing.T) {
	w := twoKeys(t)
	r := judge.New(w, "versioned", 1, 2, oneLane, judge.Versioned)
	// run everything in reverse publish order: every older update is stale
	for i := len(w.Messages) - 1; i >= 0; i-- {
		e := r.Begin(i, 0, 0)
		r.End(e, time.Millisecond, judge.Done)
	}
	res := r.Result()
	if !res.FinalStateCorrect || res.StaleDropped != 38 {
		t.Fatalf("versioned: correct=%v stale=%d, want true and 38", res.FinalStateCorrect, res.StaleDropped)
	}
}

func TestDuplicatesAndCrashes(t *testing.T) {
	w := twoKeys(t)
	r := judge.New(w, "lanes", 1, 1, oneLane, judge.Plain)
	for i := range w.Messages {
		e := r.Begin(i, 0, 0)
		r.End(e, 0, judge.Crashed)
		e = r.Begin(i, 0, 0)
		r.End(e, 0, judge.Done)
		if i == 0 {
			e = r.Begin(i, 0, 0) // redelivered after a lost ack
			r.End(e, 0, judge.Done)
		}
	}
	res := r.Result()
	if res.Crashes != 40 || res.Duplicates != 1 || res.Executions != 81 {
		t.Fatalf("crashes=%d duplicates=%d executions=%d", res.Crashes, res.Duplicates, res.Executions)
	}
}

func TestPeakBacklog(t *testing.T) {
	w, err := workload.Generate(workload.Spec{
		Keys:     workload.Keys{Names: []string{"a"}, Subjects: []string{"s.a"}, Weights: []float64{1}},
		Messages: 10, Process: workload.Process{Kind: "fixed", Mean: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := judge.New(w, "single", 1, 1, oneLane, judge.Plain)
	for i := range w.Messages {
		e := r.Begin(i, 0, time.Duration(i)*time.Millisecond)
		r.End(e, time.Duration(i+1)*time.Millisecond, judge.Done)
	}
	if got := r.Result().Lanes[0].PeakBacklog; got != 10 {
		t.Fatalf("all arrive at 0: peak backlog %d, want 10", got)
	}
}

// A fenced store refuses a write whose token is below the highest it has
// accepted for the key: the worker whose lease expired mid-job (token 5)
// finishes after the lease's next holder (token 9) wrote; its write is
// refused and counted, and the store keeps the newer message. A token that
// is not below is applied, whatever the message order.
func TestFencedStoreRefusesStaleTokens(t *testing.T) {
	w := twoKeys(t)
	a := byKey(w, 0)
	r := judge.New(w, "kv-lease", 1, 2, oneLane, judge.Fenced)
	for _, i := range byKey(w, 1) { // key b runs in order, tokens rising
		e := r.BeginFenced(i, 0, 0, uint64(100+i))
		r.End(e, time.Millisecond, judge.Done)
	}
	for _, i := range a[:len(a)-2] {
		e := r.BeginFenced(i, 0, 0, uint64(i+1))
		r.End(e, time.Millisecond, judge.Done)
	}
	older, last := a[len(a)-2], a[len(a)-1]
	zombie := r.BeginFenced(older, 0, time.Millisecond, 1000)  // its lease expires mid-job
	holder := r.BeginFenced(last, 0, 2*time.Millisecond, 1009) // the next holder starts beside it
	r.End(holder, 3*time.Millisecond, judge.Done)
	r.End(zombie, 4*time.Millisecond, judge.Done) // token 1000 < 1009: refused
	r.LeaseRetry()
	r.LeaseRetry()
	r.LeaseLost()
	res := r.Result()
	if res.StaleDropped != 1 || !res.FinalStateCorrect || res.OrderViolations != 1 || res.LeaseRetries != 2 || res.LeasesLost != 1 {
		t.Fatalf("fenced: stale %d, final state right %v, violations %d, retries %d, lost %d; want 1, true, 1, 2, 1",
			res.StaleDropped, res.FinalStateCorrect, res.OrderViolations, res.LeaseRetries, res.LeasesLost)
	}

	// Without the fence the zombie's older update lands last.
	r = judge.New(w, "unordered", 1, 2, oneLane, judge.Plain)
	for i := range w.Messages {
		if i == older {
			continue
		}
		e := r.Begin(i, 0, 0)
		r.End(e, time.Millisecond, judge.Done)
	}
	e := r.Begin(older, 0, 0)
	r.End(e, 2*time.Millisecond, judge.Done)
	if r.Result().FinalStateCorrect {
		t.Fatal("a plain store took the late older update and still ended right")
	}
}
