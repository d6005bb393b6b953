package model

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/sim/figure"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// DefaultHeadroom is the spare capacity a recommended partition count must
// have: it must drain 1.25x the target rate, and meet the p99 target while
// messages arrive at 1.25x the target rate. 25% keeps the hottest lane at
// most 80% busy at the target rate: queueing delay grows without bound as a
// serial lane nears 100% (ρ/(1-ρ)), and real traffic has bursts, key skew
// drifts and processing-time tails the model's inputs only approximate.
const DefaultHeadroom = 0.25

// Target is what a sweep must meet; a zero field is not asked for.
type Target struct {
	Rate float64       // messages per second to sustain
	P99  time.Duration // end-to-end p99 latency bound
}

// SweepConfig describes a sweep of the lanes strategy over partition counts.
type SweepConfig struct {
	From, To int
	// Base is the lanes configuration; Partitions and KeyPartition are set per count.
	Base Config
	// KeyPartition gives each workload key's partition for a partition count
	// (the planner's hash: most keys move when the count changes).
	KeyPartition func(partitions int) ([]int, error)
	Target       Target
	Headroom     float64
	// Workload makes the same key sequence with arrivals at rate (0: a
	// backlog); Rate is the workload's own rate, the load when no target
	// rate is given.
	Workload func(rate float64) (*workload.Workload, error)
	Rate     float64
}

// SweepPoint is one partition count's figures.
type SweepPoint struct {
	Partitions int `json:"partitions"`
	// Capacity is the backlog drain rate: what the lanes sustain at most.
	Capacity float64 `json:"capacity"`
	// Throughput and latencies are measured with arrivals at the load rate.
	Throughput       float64 `json:"throughput"`
	LatencyP50ms     float64 `json:"latency_p50_ms"`
	LatencyP99ms     float64 `json:"latency_p99_ms"`
	HottestLaneShare float64 `json:"hottest_lane_share"`
	BusiestLaneUtil  float64 `json:"busiest_lane_utilization"`
	Meets            bool    `json:"meets"`
}

// Sweep is the whole sweep and its recommendation.
type Sweep struct {
	From       int     `json:"from"`
	To         int     `json:"to"`
	TargetRate float64 `json:"target_rate,omitempty"`
	TargetP99  float64 `json:"target_p99_ms,omitempty"`
	Headroom   float64 `json:"headroom"`
	// LoadRate is the arrival rate latencies were measured at (0: a backlog).
	LoadRate float64      `json:"load_rate"`
	Points   []SweepPoint `json:"points"`
	// The hottest key is one serial lane whatever the partition count:
	// KeyCeiling = 1 / (its share x mean processing time) bounds capacity.
	HottestKey      string  `json:"hottest_key"`
	HottestKeyShare float64 `json:"hottest_key_share"`
	KeyCeiling      float64 `json:"hottest_key_ceiling"`
	Recommended     int     `json:"recommended,omitempty"` // 0: none meets, or no target
	// Verdict says what was recommended and why, or why nothing was.
	Verdict string `json:"-"`
}

// HasTarget reports whether a recommendation was asked for.
func (s Sweep) HasTarget() bool { return s.TargetRate > 0 || s.TargetP99 > 0 }

// RunSweep runs the lanes strategy for every partition count From..To on
// the same key sequence, twice: as a backlog (capacity) and with arrivals
// at the load rate, (1+headroom) x the target rate (or the workload's rate
// when no target rate is given). It recommends the smallest count that
// meets every target given.
func RunSweep(ctx context.Context, sc SweepConfig) (Sweep, error) {
	if sc.From < 1 || sc.To < sc.From {
		return Sweep{}, fmt.Errorf("sweep %d..%d: write A..B with 1 <= A <= B", sc.From, sc.To)
	}
	out := Sweep{From: sc.From, To: sc.To, TargetRate: sc.Target.Rate, TargetP99: ms(sc.Target.P99), Headroom: sc.Headroom}
	base := sc.Target.Rate
	if base == 0 {
		base = sc.Rate
	}
	out.LoadRate = base * (1 + sc.Headroom)

	drain, err := sc.Workload(0)
	if err != nil {
		return Sweep{}, err
	}
	out.HottestKey, out.HottestKeyShare, out.KeyCeiling = keyCeiling(drain)
	loaded := drain
	if out.LoadRate > 0 {
		if loaded, err = sc.Workload(out.LoadRate); err != nil {
			return Sweep{}, err
		}
	}
	for p := sc.From; p <= sc.To; p++ {
		pt, err := sweepPoint(ctx, drain, loaded, sc, p)
		if err != nil {
			return Sweep{}, err
		}
		pt.Meets = out.HasTarget() &&
			(sc.Target.Rate == 0 || pt.Capacity >= (1+sc.Headroom)*sc.Target.Rate) &&
			(sc.Target.P99 == 0 || pt.LatencyP99ms <= ms(sc.Target.P99))
		if pt.Meets && out.Recommended == 0 {
			out.Recommended = p
		}
		out.Points = append(out.Points, pt)
	}
	out.Verdict = SweepVerdict(out)
	return out, nil
}

// SweepVerdict says what was recommended and why, or why nothing was:
// when the hottest key alone caps capacity below the target, that more
// partitions cannot help.
func SweepVerdict(sw Sweep) string {
	if !sw.HasTarget() {
		return "No recommendation: give --target-rate and/or --target-p99."
	}
	var need []string
	if sw.TargetRate > 0 {
		need = append(need, fmt.Sprintf("drain at least %s (%.2fx the %s target)", figure.Rate((1+sw.Headroom)*sw.TargetRate), 1+sw.Headroom, figure.Rate(sw.TargetRate)))
	}
	if sw.TargetP99 > 0 {
		at := "on a backlog"
		if sw.LoadRate > 0 {
			at = "with arrivals at " + figure.Rate(sw.LoadRate)
		}
		need = append(need, fmt.Sprintf("keep p99 within %s %s", figure.Millis(sw.TargetP99), at))
	}
	why := strings.Join(need, " and ")
	headroom := fmt.Sprintf("headroom %.0f%%: the hottest lane stays below %.0f%% busy at the target, where queueing delay is still small", sw.Headroom*100, 100/(1+sw.Headroom))
	if sw.Recommended == 0 {
		hint := "Try a wider range or more --workers per lane."
		if sw.TargetRate > 0 && sw.KeyCeiling > 0 && sw.KeyCeiling < (1+sw.Headroom)*sw.TargetRate {
			hint = fmt.Sprintf("More partitions cannot help: the hottest key, %s, carries %s of the messages and a key is one serial lane, so it caps capacity at about %s. Split that key (a finer key) or make its processing faster.",
				sw.HottestKey, figure.Share(sw.HottestKeyShare), figure.Rate(sw.KeyCeiling))
		}
		return fmt.Sprintf("No partition count in %d..%d can %s (%s). %s", sw.From, sw.To, why, headroom, hint)
	}
	return fmt.Sprintf("Recommended: %d partitions, the smallest that can %s (%s).", sw.Recommended, why, headroom)
}

func sweepPoint(ctx context.Context, drain, loaded *workload.Workload, sc SweepConfig, p int) (SweepPoint, error) {
	parts, err := sc.KeyPartition(p)
	if err != nil {
		return SweepPoint{}, err
	}
	cfg := sc.Base
	cfg.Strategy, cfg.Partitions, cfg.KeyPartition = strategy.Lanes, p, parts
	capRes, err := Run(ctx, drain, cfg)
	if err != nil {
		return SweepPoint{}, err
	}
	res := capRes
	if loaded != drain {
		if res, err = Run(ctx, loaded, cfg); err != nil {
			return SweepPoint{}, err
		}
	}
	busiest := 0.0
	for _, l := range res.Lanes {
		busiest = max(busiest, l.Utilization)
	}
	return SweepPoint{Partitions: p, Capacity: capRes.Throughput, Throughput: res.Throughput,
		LatencyP50ms: res.LatencyP50ms, LatencyP99ms: res.LatencyP99ms,
		HottestLaneShare: res.HottestLaneShare, BusiestLaneUtil: busiest}, nil
}

func keyCeiling(w *workload.Workload) (string, float64, float64) {
	counts := make([]int, len(w.Spec.Keys.Names))
	hot := 0
	for _, m := range w.Messages {
		counts[m.Key]++
		if counts[m.Key] > counts[hot] {
			hot = m.Key
		}
	}
	share := float64(counts[hot]) / float64(len(w.Messages))
	ceiling := 0.0
	if mean := w.Spec.Process.Average().Seconds(); mean > 0 {
		ceiling = 1 / (share * mean)
	}
	return w.Spec.Keys.Names[hot], share, ceiling
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
