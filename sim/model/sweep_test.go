package model_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/workload"
)

// 64 equally busy keys, key k in partition k mod p, 10ms each: p lanes
// drain 64/ceil(64/p) keys' worth at a time, capacity 100*64/ceil(64/p)/s.
// Target 1000/s with 25% headroom needs capacity >= 1250/s: ceil(64/p) <= 5,
// so p >= 13 (12 gives 1067/s). Without headroom 11 would do (1067/s).
func sweepCase(t *testing.T, target model.Target, headroom float64, from, to int) model.Sweep {
	t.Helper()
	sc := model.SweepConfig{
		From: from, To: to, Target: target, Headroom: headroom,
		Base:         model.Config{WorkersPerLane: 1, Lane: lane(30 * time.Second)},
		KeyPartition: func(p int) ([]int, error) { return modulo(64, p), nil },
		Workload: func(rate float64) (*workload.Workload, error) {
			return roundRobin(t, 64, 20, workload.Spec{Rate: rate, Process: fixed(10 * ms), Seed: 1}), nil
		},
	}
	s, err := model.RunSweep(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSweepRecommendsSmallestWithHeadroom(t *testing.T) {
	s := sweepCase(t, model.Target{Rate: 1000}, model.DefaultHeadroom, 1, 20)
	if s.Recommended != 13 {
		t.Fatalf("recommended %d, want 13", s.Recommended)
	}
	if want := "Recommended: 13 partitions, the smallest that can drain at least 1250/s (1.25x the 1000/s target)"; !strings.HasPrefix(s.Verdict, want) {
		t.Fatalf("verdict %q, want it to start %q", s.Verdict, want)
	}
	if s.LoadRate != 1250 || len(s.Points) != 20 {
		t.Fatalf("load rate %.0f with %d points, want 1250 and 20", s.LoadRate, len(s.Points))
	}
	if c := s.Points[12].Capacity; !near(c, 1280, 1e-9) {
		t.Fatalf("13 lanes: capacity %.1f/s, want 1280/s", c)
	}
	// At 1250/s a message every 0.8ms; 12 of the 13 lanes hold keys k,
	// k+13, ..., k+52: 10.4ms apart, except 9.6ms from k+52 back to k, whose
	// message waits 0.4ms. p50 10ms, p99 10.4ms.
	if p := s.Points[12]; !near(p.LatencyP99ms, 10.4, 1e-9) || p.LatencyP50ms != 10 {
		t.Fatalf("13 lanes at 1250/s: p50 %.2fms p99 %.2fms, want 10ms and 10.4ms", p.LatencyP50ms, p.LatencyP99ms)
	}
	if s := sweepCase(t, model.Target{Rate: 1000}, 0, 1, 20); s.Recommended != 11 {
		t.Fatalf("no headroom: recommended %d, want 11", s.Recommended)
	}
}

func TestSweepLatencyTargetAndNoAnswer(t *testing.T) {
	// A p99 of exactly the 10ms processing time needs no wait at all:
	// 13-15 lanes put 5 keys on a lane and some arrive less than 10ms after
	// the previous; 16 lanes hold 4 keys each, 12.8ms apart. 12 lanes cannot
	// keep up with 1250/s: the backlog grows, and so does p99.
	s := sweepCase(t, model.Target{Rate: 1000, P99: 10 * ms}, model.DefaultHeadroom, 10, 17)
	if s.Recommended != 16 || s.Points[2].LatencyP99ms < 100 {
		t.Fatalf("recommended %d, 12-lane p99 %.1fms; want 16 and a growing backlog", s.Recommended, s.Points[2].LatencyP99ms)
	}
	if s := sweepCase(t, model.Target{Rate: 1000}, model.DefaultHeadroom, 1, 12); s.Recommended != 0 {
		t.Fatalf("1..12 cannot reach 1250/s, yet %d was recommended", s.Recommended)
	}
	if s := sweepCase(t, model.Target{}, model.DefaultHeadroom, 1, 4); s.Recommended != 0 || s.HasTarget() {
		t.Fatal("no target, yet a recommendation")
	}
}

// The verdict without a recommendation says why: no target, or a key too
// hot for any partition count.
func TestSweepVerdicts(t *testing.T) {
	sw := model.Sweep{From: 10, To: 16, TargetRate: 1000, TargetP99: 10, Headroom: 0.25, LoadRate: 1250,
		HottestKey: "k0", HottestKeyShare: 1.0 / 64, KeyCeiling: 800}
	if v := model.SweepVerdict(sw); !strings.Contains(v, "More partitions cannot help") || !strings.Contains(v, "k0") {
		t.Fatalf("hot-key verdict: %s", v)
	}
	sw.TargetRate, sw.TargetP99 = 0, 0
	if v := model.SweepVerdict(sw); !strings.HasPrefix(v, "No recommendation") {
		t.Fatalf("no-target verdict: %s", v)
	}
}
