package model

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
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

// SweepConfig describes a sweep of the lanes strategy over partition
// counts and, for key-parallel lanes, keys in flight.
type SweepConfig struct {
	From, To int
	// Counts, when set, are the partition counts to try instead of
	// From..To (ascending, no repeats).
	Counts []int
	// KeysInFlight are the keys in flight K to try with every count
	// (ascending, no repeats); empty tries the base lane's alone.
	KeysInFlight []int
	// LaneFor is the lane setting for K keys in flight; nil: the base
	// lane WithKeysInFlight(K).
	LaneFor func(k int) Lane
	// Server is the server's CPU term (a zero Cores leaves it out).
	Server ServerCost
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

// SweepPoint is one partition count's figures, with one keys in flight.
type SweepPoint struct {
	Partitions   int `json:"partitions"`
	KeysInFlight int `json:"keys_in_flight"`
	// Capacity is what these lanes sustain at most: the backlog drain
	// rate (LaneCapacity), or what the server can serve for this many
	// lanes (ServerCeiling) when that is less.
	Capacity     float64 `json:"capacity"`
	LaneCapacity float64 `json:"lane_capacity"`
	// ServerCeiling is the messages per second the server's CPU can serve
	// with this many lanes, ServerCPU its CPU per message (0: the server
	// term is off).
	ServerCeiling float64 `json:"server_ceiling,omitempty"`
	ServerCPUus   float64 `json:"server_cpu_per_message_us,omitempty"`
	// Limit is what bounds Capacity: "lanes" (the handlers, the keys'
	// spread over the lanes and their windows) or "server".
	Limit string `json:"limit"`
	// Overloaded: the load rate is more than the server can serve with
	// these lanes, so its queue grows and the latencies (which the model
	// measures without the server) do not hold.
	Overloaded bool `json:"overloaded,omitempty"`
	// PastServerPeak: the server bounds this point, and fewer lanes with
	// the same keys in flight drained at least as fast: the lanes added
	// only slowed the server down. Such a point is never recommended.
	PastServerPeak bool `json:"past_server_peak,omitempty"`
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
	// KeysInFlight are the keys in flight tried with every count, when
	// any is above 1 (a sweep of key-parallel lanes), and
	// RecommendedKeysInFlight the recommended one's.
	KeysInFlight            []int `json:"keys_in_flight,omitempty"`
	RecommendedKeysInFlight int   `json:"recommended_keys_in_flight,omitempty"`
	// Server is the server's CPU term the capacities account for (nil:
	// left out).
	Server *ServerCost `json:"server,omitempty"`
	// Verdict says what was recommended and why, or why nothing was.
	Verdict string `json:"-"`
}

// Keyed reports whether the sweep tried key-parallel lanes.
func (s Sweep) Keyed() bool { return len(s.KeysInFlight) > 0 }

// ServerBound reports whether the server's CPU bounds any point.
func (s Sweep) ServerBound() bool {
	for _, p := range s.Points {
		if p.Limit == LimitServer {
			return true
		}
	}
	return false
}

// What bounds a point's capacity.
const (
	LimitLanes  = "lanes"
	LimitServer = "server"
)

// HasTarget reports whether a recommendation was asked for.
func (s Sweep) HasTarget() bool { return s.TargetRate > 0 || s.TargetP99 > 0 }

// RunSweep runs the lanes strategy for every partition count From..To on
// the same key sequence, twice: as a backlog (capacity) and with arrivals
// at the load rate, (1+headroom) x the target rate (or the workload's rate
// when no target rate is given). It recommends the smallest count that
// meets every target given, never one past the server's peak: a count the
// server bounds below what fewer lanes drained (its latencies, measured
// without server time, would flatter it).
//
// With several keys in flight it runs every count with each, and
// recommends the fewest lanes, then the fewest keys in flight, that
// meet the targets: the server pays CPU for every lane (ServerCost), a
// lane's window holds messages in memory and comes back as redeliveries
// after a take-over, and every repartition moves keys between more lanes.
func RunSweep(ctx context.Context, sc SweepConfig) (Sweep, error) {
	counts := sc.Counts
	if len(counts) == 0 {
		if sc.From < 1 || sc.To < sc.From {
			return Sweep{}, fmt.Errorf("sweep %d..%d: write A..B with 1 <= A <= B", sc.From, sc.To)
		}
		for p := sc.From; p <= sc.To; p++ {
			counts = append(counts, p)
		}
	}
	if !ascending(counts) {
		return Sweep{}, fmt.Errorf("sweep: partition counts %v must be 1 or more, ascending, without repeats", counts)
	}
	ks := sc.KeysInFlight
	if len(ks) == 0 {
		ks = []int{max(1, sc.Base.Lane.KeysInFlight)}
	}
	if !ascending(ks) {
		return Sweep{}, fmt.Errorf("sweep: keys in flight %v must be 1 or more, ascending, without repeats", ks)
	}
	laneFor := sc.LaneFor
	if laneFor == nil {
		laneFor = sc.Base.Lane.WithKeysInFlight
	}
	out := Sweep{From: counts[0], To: counts[len(counts)-1], TargetRate: sc.Target.Rate, TargetP99: ms(sc.Target.P99), Headroom: sc.Headroom}
	if slices.ContainsFunc(ks, func(k int) bool { return k > 1 }) {
		out.KeysInFlight = ks
	}
	if sc.Server.On() {
		if err := sc.Server.Curve.Check(); err != nil {
			return Sweep{}, err
		}
		server := sc.Server
		out.Server = &server
	}
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
	fastest := map[int]float64{} // per keys in flight, the best capacity with fewer lanes
	for _, p := range counts {
		parts, err := sc.KeyPartition(p)
		if err != nil {
			return Sweep{}, err
		}
		for _, k := range ks {
			cfg := sc.Base
			cfg.Strategy, cfg.Partitions, cfg.KeyPartition, cfg.Lane = strategy.Lanes, p, parts, laneFor(k)
			pt, err := sweepPoint(ctx, drain, loaded, cfg, sc.Server)
			if err != nil {
				return Sweep{}, err
			}
			pt.KeysInFlight = k
			pt.Overloaded = pt.ServerCeiling > 0 && pt.ServerCeiling < out.LoadRate
			best, tried := fastest[k]
			pt.PastServerPeak = pt.Limit == LimitServer && tried && best >= pt.Capacity
			fastest[k] = max(best, pt.Capacity)
			pt.Meets = out.HasTarget() && !pt.Overloaded && !pt.PastServerPeak &&
				(sc.Target.Rate == 0 || pt.Capacity >= (1+sc.Headroom)*sc.Target.Rate) &&
				(sc.Target.P99 == 0 || pt.LatencyP99ms <= ms(sc.Target.P99))
			if pt.Meets && out.Recommended == 0 {
				out.Recommended = p
				if out.Keyed() {
					out.RecommendedKeysInFlight = k
				}
			}
			out.Points = append(out.Points, pt)
		}
	}
	out.Verdict = SweepVerdict(out)
	return out, nil
}

func ascending(xs []int) bool {
	for i, x := range xs {
		if x < 1 || i > 0 && x <= xs[i-1] {
			return false
		}
	}
	return len(xs) > 0
}

// WithKeysInFlight is the lane with k keys in flight, as the planner
// makes it: above 1 a pinned lane with max ack pending k; 1 a serial
// lane (max ack pending 1; a pin the planner added for keys in flight
// stays, which only matters after a worker's death).
func (l Lane) WithKeysInFlight(k int) Lane {
	if k <= 1 {
		if l.KeysInFlight > 1 {
			l.MaxAckPending = 1
		}
		l.KeysInFlight = k
		return l
	}
	l.KeysInFlight, l.MaxAckPending, l.Pinned = k, k, true
	if l.PinnedTTL <= 0 {
		l.PinnedTTL = DefaultPinnedTTL
	}
	return l
}

// DefaultPinnedTTL is the planner's pinned TTL, for lanes made pinned here.
const DefaultPinnedTTL = 2 * time.Minute

// SweepVerdict says what was recommended and why, or why nothing was:
// when the hottest key alone caps capacity below the target, that more
// partitions cannot help.
func SweepVerdict(sw Sweep) string {
	server := join(serverWords(sw), pastPeakWords(sw))
	if !sw.HasTarget() {
		return join("No recommendation: give --target-rate and/or --target-p99.", server)
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
	hotKey := sw.TargetRate > 0 && sw.KeyCeiling > 0 && sw.KeyCeiling < (1+sw.Headroom)*sw.TargetRate
	if !sw.Keyed() {
		if sw.Recommended == 0 {
			hint := "Try a wider range or more --workers per lane."
			if hotKey {
				hint = fmt.Sprintf("More partitions cannot help: the hottest key, %s, carries %s of the messages and a key is one serial lane, so it caps capacity at about %s. Split that key (a finer key) or make its processing faster.",
					sw.HottestKey, figure.Share(sw.HottestKeyShare), figure.Rate(sw.KeyCeiling))
			} else if words := serverBoundWords(sw); words != "" {
				hint = words + " Run fewer lanes with keys in flight (--sweep-keys-in-flight), or give the server more cores (--server-cores)."
			}
			return join(fmt.Sprintf("No partition count in %s can %s (%s). %s", sw.Counts(), why, headroom, hint), server)
		}
		return join(fmt.Sprintf("Recommended: %d partitions, the smallest that can %s (%s).", sw.Recommended, why, headroom), server)
	}
	if sw.Recommended == 0 {
		hint := "Try more partitions or more keys in flight (--sweep, --sweep-keys-in-flight)."
		if hotKey {
			hint = fmt.Sprintf("Neither more partitions nor more keys in flight can help: the hottest key, %s, carries %s of the messages and a key runs one message at a time, so it caps capacity at about %s. Split that key (a finer key) or make its processing faster.",
				sw.HottestKey, figure.Share(sw.HottestKeyShare), figure.Rate(sw.KeyCeiling))
		} else if words := serverBoundWords(sw); words != "" {
			hint = words + " Try fewer lanes with more keys in flight, or give the server more cores (--server-cores)."
		}
		return join(fmt.Sprintf("No partition count in %s with keys in flight %s can %s (%s). %s", sw.Counts(), intList(sw.KeysInFlight), why, headroom, hint), server)
	}
	pick := fmt.Sprintf("%d partitions with %d keys in flight (lane.keys_in_flight: %d)", sw.Recommended, sw.RecommendedKeysInFlight, sw.RecommendedKeysInFlight)
	if sw.RecommendedKeysInFlight == 1 {
		pick = fmt.Sprintf("%d serial partitions (keys in flight 1)", sw.Recommended)
	}
	return join(fmt.Sprintf("Recommended: %s, the fewest lanes, then the fewest keys in flight, that can %s (%s).", pick, why, headroom), fewerLanes(sw), server)
}

// Counts names the partition counts tried: A..B, or a list.
func (s Sweep) Counts() string {
	var counts []int
	for _, p := range s.Points {
		if len(counts) == 0 || counts[len(counts)-1] != p.Partitions {
			counts = append(counts, p.Partitions)
		}
	}
	if len(counts) == 0 || counts[len(counts)-1]-counts[0] == len(counts)-1 {
		return fmt.Sprintf("%d..%d", s.From, s.To)
	}
	return intList(counts)
}

func intList(xs []int) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Itoa(x)
	}
	return strings.Join(out, ", ")
}

// join puts the verdict's paragraphs one per line.
func join(paragraphs ...string) string {
	var out []string
	for _, s := range paragraphs {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

// serverWords says why the server bounds some points: what it pays per
// lane, with the fewest and the most lanes tried.
func serverWords(sw Sweep) string {
	if sw.Server == nil || !sw.ServerBound() {
		return ""
	}
	lo, hi := sw.Points[0], sw.Points[len(sw.Points)-1]
	return fmt.Sprintf("The server's CPU bounds the points limited by server: it pays for every lane (file storage rewrites each active lane's state), about %s of CPU per message with %d lanes and %s with %d, so on %s it serves at most %s and %s.",
		micros(lo.ServerCPUus), lo.Partitions, micros(hi.ServerCPUus), hi.Partitions, coresWords(sw.Server.Cores), figure.Rate(lo.ServerCeiling), figure.Rate(hi.ServerCeiling))
}

// serverBoundWords says that more lanes cannot help when the server's CPU
// bounds the fastest point tried, or the points past it: every lane added
// costs it more per message. "" when the lanes bound the sweep (or the
// server term is off).
func serverBoundWords(sw Sweep) string {
	var best SweepPoint
	past := false
	for _, p := range sw.Points {
		if p.Capacity > best.Capacity {
			best = p
		}
		past = past || p.PastServerPeak
	}
	switch {
	case sw.Server == nil:
		return ""
	case best.Limit == LimitServer:
		return fmt.Sprintf("More partitions cannot help: the server's CPU bounds the fastest point, %s at %s (about %s of CPU per message on %s), and every lane more costs it more per message.",
			pointName(sw, best), figure.Rate(best.Capacity), micros(best.ServerCPUus), coresWords(sw.Server.Cores))
	case past:
		return fmt.Sprintf("More partitions cannot help: the fastest point is %s at %s, and past it the server's CPU bounds the lanes, every lane more costing it more per message.",
			pointName(sw, best), figure.Rate(best.Capacity))
	}
	return ""
}

// pastPeakWords says where more lanes began to slow the server down, when
// the sweep went past that point.
func pastPeakWords(sw Sweep) string {
	for _, p := range sw.Points {
		if !p.PastServerPeak {
			continue
		}
		var peak SweepPoint
		for _, q := range sw.Points {
			if q.KeysInFlight == p.KeysInFlight && q.Partitions < p.Partitions && q.Capacity >= peak.Capacity {
				peak = q
			}
		}
		return fmt.Sprintf("Past %s, more lanes only slow the server down: %s drain at most %s against %s, so no count past the server's peak is recommended.",
			pointName(sw, peak), pointName(sw, p), figure.Rate(p.Capacity), figure.Rate(peak.Capacity))
	}
	return ""
}

// pointName is "16 lanes", or in a sweep of keys in flight "16 serial
// lanes" or "16 lanes x 64 keys in flight".
func pointName(sw Sweep, p SweepPoint) string {
	switch {
	case !sw.Keyed():
		return fmt.Sprintf("%d lanes", p.Partitions)
	case p.KeysInFlight <= 1:
		return fmt.Sprintf("%d serial lanes", p.Partitions)
	}
	return fmt.Sprintf("%d lanes x %d keys in flight", p.Partitions, p.KeysInFlight)
}

func coresWords(cores float64) string {
	return strconv.FormatFloat(cores, 'g', -1, 64) + " " + figure.Plural(int(math.Ceil(cores)), "core", "cores")
}

// fewerLanes says why a key-parallel recommendation beats more serial
// lanes, when the sweep shows it: a serial count above the pick that
// meets nothing, or costs the server more.
func fewerLanes(sw Sweep) string {
	if sw.RecommendedKeysInFlight <= 1 {
		return ""
	}
	var best *SweepPoint
	for i, p := range sw.Points {
		if p.KeysInFlight == 1 && p.Partitions > sw.Recommended && (best == nil || p.Capacity > best.Capacity) {
			best = &sw.Points[i]
		}
	}
	if best == nil {
		return ""
	}
	var rec SweepPoint
	for _, p := range sw.Points {
		if p.Partitions == sw.Recommended && p.KeysInFlight == sw.RecommendedKeysInFlight {
			rec = p
		}
	}
	cost := ""
	if rec.ServerCPUus > 0 && best.ServerCPUus > 0 {
		cost = fmt.Sprintf("%.1fx the server's CPU per message", best.ServerCPUus/rec.ServerCPUus)
	}
	var what string
	switch {
	case best.Meets && cost != "":
		what = fmt.Sprintf("%d serial lanes would meet the targets too, for %s", best.Partitions, cost)
	case best.Meets:
		what = fmt.Sprintf("%d serial lanes would meet the targets too, with %d times the lanes", best.Partitions, best.Partitions/max(1, sw.Recommended))
	default:
		bound := "its keys' spread over serial lanes"
		if best.Limit == LimitServer {
			bound = "the server's CPU"
		}
		what = fmt.Sprintf("the best serial layout tried, %d lanes, drains at most %s (bound by %s)", best.Partitions, figure.Rate(best.Capacity), bound)
		if cost != "" {
			what += ", for " + cost
		}
	}
	return fmt.Sprintf("Fewer lanes win: %s. Keys in flight give a lane parallelism without more lanes (one hot key is still one message at a time).", what)
}

func micros(us float64) string {
	if us >= 10 {
		return fmt.Sprintf("%.0fµs", us)
	}
	return fmt.Sprintf("%.1fµs", us)
}

func sweepPoint(ctx context.Context, drain, loaded *workload.Workload, cfg Config, server ServerCost) (SweepPoint, error) {
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
	pt := SweepPoint{Partitions: cfg.Partitions, Capacity: capRes.Throughput, LaneCapacity: capRes.Throughput, Limit: LimitLanes,
		Throughput: res.Throughput, LatencyP50ms: res.LatencyP50ms, LatencyP99ms: res.LatencyP99ms,
		HottestLaneShare: res.HottestLaneShare, BusiestLaneUtil: busiest}
	if server.On() {
		pt.ServerCPUus = float64(server.CPUPerMessage(cfg.Partitions)) / float64(time.Microsecond)
		pt.ServerCeiling = server.Ceiling(cfg.Partitions)
		if pt.ServerCeiling < pt.Capacity {
			pt.Capacity, pt.Limit = pt.ServerCeiling, LimitServer
		}
	}
	return pt, nil
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
