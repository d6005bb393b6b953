package model_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/planner"
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

// testCurve is a server that pays 100µs a message with 1 lane and 1ms
// with 100: 100µs x sqrt(lanes), so one core serves 10,000/sqrt(lanes)
// messages a second (5,000/s with 4 lanes, 1,250/s with 64, 625/s with
// 256). The tests' own, so that they hold whatever the measured table
// says.
var testCurve = planner.ServerCPUCurve{{Lanes: 1, PerMessageUs: 100, Cores: 1}, {Lanes: 100, PerMessageUs: 1000, Cores: 1}}

func testServer(cores float64) model.ServerCost {
	return model.ServerCost{Cores: cores, Curve: testCurve}
}

// keyedSweep: 256 keys in turn, 4 messages each, a 1ms handler, key k in
// partition k mod p; counts 4 and 256, keys in flight 1 and 64.
//   - 4 serial lanes: 64 keys each, one at a time: 4000/s.
//   - 4 lanes x 64: every key of a lane at once, 256,000/s by the lanes,
//     but the server serves 4 lanes at most 5,000/s a core.
//   - 256 serial lanes: one key each, 256,000/s by the lanes, and the
//     server serves 256 lanes at most 625/s a core: past its peak.
func keyedSweep(t *testing.T, target model.Target, server model.ServerCost) model.Sweep {
	t.Helper()
	sc := model.SweepConfig{
		Counts: []int{4, 256}, KeysInFlight: []int{1, 64}, Server: server, Target: target, Headroom: model.DefaultHeadroom,
		Base:         model.Config{WorkersPerLane: 1, Lane: lane(30 * time.Second)},
		KeyPartition: func(p int) ([]int, error) { return modulo(256, p), nil },
		Workload: func(rate float64) (*workload.Workload, error) {
			return roundRobin(t, 256, 4, workload.Spec{Rate: rate, Process: fixed(ms), Seed: 1}), nil
		},
	}
	s, err := model.RunSweep(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The sweep recommends partitions and keys in flight together, the fewest
// lanes first, and never more lanes than the server can use.
func TestSweepRecommendsPartitionsAndKeysInFlight(t *testing.T) {
	cases := []struct {
		name    string
		target  float64
		server  model.ServerCost
		p, k    int // the recommendation; 0: none
		verdict []string
	}{
		{"serial lanes suffice", 3000, testServer(1), 4, 1, []string{"Recommended: 4 serial partitions (keys in flight 1)"}},
		{"keys in flight beat more serial lanes", 3500, testServer(1), 4, 64, []string{
			"Recommended: 4 partitions with 64 keys in flight (lane.keys_in_flight: 64), the fewest lanes, then the fewest keys in flight",
			"Fewer lanes win: the best serial layout tried, 256 lanes, drains at most 625/s (bound by the server's CPU), for 8.0x the server's CPU per message.",
			"one hot key is still one message at a time",
			"about 200µs of CPU per message with 4 lanes and 1600µs with 256",
			"Past 4 serial lanes, more lanes only slow the server down: 256 serial lanes drain at most 625/s against 4000/s",
		}},
		{"the server bounds the fastest point", 5000, testServer(1), 0, 0, []string{
			"More partitions cannot help: the server's CPU bounds the fastest point, 4 lanes x 64 keys in flight at 5000/s (about 200µs of CPU per message on 1 core)",
			"Try fewer lanes with more keys in flight, or give the server more cores (--server-cores).",
		}},
		{"a bigger server", 5000, testServer(2), 4, 64, []string{"Recommended: 4 partitions with 64 keys in flight"}},
		// Without the server term 256 serial lanes meet the target too, yet
		// the fewest lanes are still the pick, and the verdict says what
		// more lanes would cost.
		{"no server term", 10000, model.ServerCost{}, 4, 64, []string{"Fewer lanes win: 256 serial lanes would meet the targets too, with 64 times the lanes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := keyedSweep(t, model.Target{Rate: c.target}, c.server)
			if s.Recommended != c.p || s.RecommendedKeysInFlight != c.k || !s.Keyed() || len(s.Points) != 4 {
				t.Fatalf("recommended %d x %d of %d points, want %d x %d of 4:\n%s", s.Recommended, s.RecommendedKeysInFlight, len(s.Points), c.p, c.k, s.Verdict)
			}
			for _, want := range c.verdict {
				if !strings.Contains(s.Verdict, want) {
					t.Errorf("verdict lacks %q:\n%s", want, s.Verdict)
				}
			}
			if (s.Server != nil) != c.server.On() || s.ServerBound() != c.server.On() {
				t.Errorf("server term %+v, server bound %v", s.Server, s.ServerBound())
			}
		})
	}
	s := keyedSweep(t, model.Target{Rate: 3500}, testServer(1))
	want := []struct {
		p, k           int
		capacity       float64
		limit          string
		past, overload bool
		meets          bool
	}{
		{4, 1, 4000, model.LimitLanes, false, false, false},
		{4, 64, 5000, model.LimitServer, false, false, true},
		{256, 1, 625, model.LimitServer, true, true, false},
		{256, 64, 625, model.LimitServer, true, true, false},
	}
	for i, w := range want {
		pt := s.Points[i]
		if pt.Partitions != w.p || pt.KeysInFlight != w.k || !near(pt.Capacity, w.capacity, 1e-6) || pt.Limit != w.limit ||
			pt.PastServerPeak != w.past || pt.Overloaded != w.overload || pt.Meets != w.meets {
			t.Errorf("point %d: %+v; want %d x %d, capacity %.0f/s, limit %s, past the peak %v, overloaded %v, meets %v", i, pt, w.p, w.k, w.capacity, w.limit, w.past, w.overload, w.meets)
		}
	}
	if lc := s.Points[1].LaneCapacity; !near(lc, 256000, 1e-9) {
		t.Errorf("4 x 64: the lanes alone drain %.0f/s, want 256000/s", lc)
	}
}

// The comparison on the measured server term: 1,024 keys and a
// 1ms handler, where 16 serial lanes drain 16,000/s. 16 lanes x 64 keys
// in flight beat 1,024 serial lanes, which the server's CPU per lane
// holds to a fraction of that: past its peak.
func TestSweepMeasuredServerFavoursFewerLanes(t *testing.T) {
	sc := model.SweepConfig{
		Counts: []int{16, 1024}, KeysInFlight: []int{1, 64}, Server: model.DefaultServerCost, Target: model.Target{Rate: 14000}, Headroom: model.DefaultHeadroom,
		Base:         model.Config{WorkersPerLane: 1, Lane: lane(30 * time.Second)},
		KeyPartition: func(p int) ([]int, error) { return modulo(1024, p), nil },
		Workload: func(rate float64) (*workload.Workload, error) {
			return roundRobin(t, 1024, 4, workload.Spec{Rate: rate, Process: fixed(ms), Seed: 1}), nil
		},
	}
	s, err := model.RunSweep(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if s.Recommended != 16 || s.RecommendedKeysInFlight != 64 {
		t.Fatalf("recommended %d x %d, want 16 x 64:\n%s", s.Recommended, s.RecommendedKeysInFlight, s.Verdict)
	}
	keyed, serial := s.Points[1], s.Points[2]
	if serial.Partitions != 1024 || serial.KeysInFlight != 1 || serial.Limit != model.LimitServer || !serial.PastServerPeak ||
		!near(serial.Capacity, model.DefaultServerCost.Ceiling(1024), 1e-9) || keyed.Capacity < 4*serial.Capacity {
		t.Fatalf("16 x 64 %+v against 1024 serial %+v: want the serial lanes past the server's peak, at a quarter or less", keyed, serial)
	}
}

// sweepServer: sweepCase's 64 keys at 10ms (p lanes drain
// 100*64/ceil(64/p)/s) on the test curve's server; counts 1..64 doubling.
// On one core: 16 lanes 1,600/s (lanes), 32 lanes 1,768/s (the server:
// 10,000/sqrt(32)), 64 lanes 1,250/s (the server: past its peak).
func sweepServer(t *testing.T, target model.Target, cores float64, process workload.Process) model.Sweep {
	t.Helper()
	sc := model.SweepConfig{
		Counts: []int{1, 2, 4, 8, 16, 32, 64}, Server: testServer(cores), Target: target, Headroom: model.DefaultHeadroom,
		Base:         model.Config{WorkersPerLane: 1, Lane: lane(30 * time.Second)},
		KeyPartition: func(p int) ([]int, error) { return modulo(64, p), nil },
		Workload: func(rate float64) (*workload.Workload, error) {
			return roundRobin(t, 64, 40, workload.Spec{Rate: rate, Process: process, Seed: 1}), nil
		},
	}
	s, err := model.RunSweep(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A serial sweep recommends more lanes only while they raise the rate:
// once the server's CPU bounds it, more lanes only slow the server down.
func TestSweepStopsAtTheServerPeak(t *testing.T) {
	exp := workload.Process{Kind: "exp", Mean: 10 * ms}
	cases := []struct {
		name    string
		target  model.Target
		cores   float64
		process workload.Process
		want    int
		verdict string
	}{
		{"the lanes bound the pick", model.Target{Rate: 1000}, 1, fixed(10 * ms), 16, "Recommended: 16 partitions"},
		{"the server bounds the pick, which still drains more than fewer lanes", model.Target{Rate: 1400}, 1, fixed(10 * ms), 32, "Recommended: 32 partitions"},
		{"beyond the server's peak", model.Target{Rate: 1500}, 1, fixed(10 * ms), 0,
			"More partitions cannot help: the server's CPU bounds the fastest point, 32 lanes at 1768/s (about 566µs of CPU per message on 1 core)"},
		// With exponential handlers 32 lanes miss a 50ms p99 and 64 lanes
		// would meet it in the model, which gives the server no time; on
		// 2 cores 64 lanes drain less than 32 (past the peak), on 2.5 more.
		{"a p99 the model meets past the peak", model.Target{Rate: 1500, P99: 50 * ms}, 2, exp, 0,
			"More partitions cannot help: the fastest point is 32 lanes"},
		{"a p99 met before the peak", model.Target{Rate: 1500, P99: 50 * ms}, 2.5, exp, 64, "Recommended: 64 partitions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sweepServer(t, c.target, c.cores, c.process)
			if s.Recommended != c.want || !strings.Contains(s.Verdict, c.verdict) {
				t.Fatalf("recommended %d, want %d; the verdict lacks %q:\n%s", s.Recommended, c.want, c.verdict, s.Verdict)
			}
			if s.Keyed() || s.RecommendedKeysInFlight != 0 {
				t.Fatalf("a serial sweep recommends keys in flight %d", s.RecommendedKeysInFlight)
			}
			best := 0.0
			for _, p := range s.Points {
				past := p.Limit == model.LimitServer && best >= p.Capacity
				if p.PastServerPeak != past || past && p.Meets {
					t.Errorf("%d lanes: past the peak %v, meets %v; want past %v and not meeting if past", p.Partitions, p.PastServerPeak, p.Meets, past)
				}
				if p.Partitions == s.Recommended && past {
					t.Errorf("recommended %d lanes, past the server's peak", p.Partitions)
				}
				best = max(best, p.Capacity)
			}
		})
	}
	// The p99 cases: 64 lanes meet the p99 target in the model either way;
	// only the server's peak tells them apart.
	for _, cores := range []float64{2, 2.5} {
		s := sweepServer(t, model.Target{Rate: 1500, P99: 50 * ms}, cores, exp)
		p32, p64 := s.Points[5], s.Points[6]
		if p32.LatencyP99ms <= 50 || p64.LatencyP99ms > 50 || p64.Overloaded || p64.PastServerPeak != (cores == 2) {
			t.Errorf("%g cores: 32 lanes p99 %.1fms, 64 lanes p99 %.1fms, overloaded %v, past the peak %v", cores, p32.LatencyP99ms, p64.LatencyP99ms, p64.Overloaded, p64.PastServerPeak)
		}
	}
	if s := sweepServer(t, model.Target{Rate: 1500}, 1, fixed(10*ms)); !strings.Contains(s.Verdict, "Past 32 lanes, more lanes only slow the server down: 64 lanes drain at most 1250/s against 1768/s") {
		t.Errorf("verdict: %s", s.Verdict)
	}
}

// The server term: the measured curve on the cores the server used, and
// another server's cores; without cores it is off.
func TestServerTerm(t *testing.T) {
	with := sweepCase(t, model.Target{Rate: 1000}, model.DefaultHeadroom, 1, 20)
	if with.Keyed() || with.ServerBound() || with.Recommended != 13 {
		t.Fatalf("keyed %v, server bound %v, recommended %d", with.Keyed(), with.ServerBound(), with.Recommended)
	}
	c := model.DefaultServerCost
	if c.Cores != planner.MeasuredServerCPU.Cores() || len(c.Curve) != len(planner.MeasuredServerCPU) || !c.On() {
		t.Fatalf("default %+v, want the measured table on its cores", c)
	}
	for _, m := range planner.MeasuredServerCPU {
		if got := c.CPUPerMessage(m.Lanes); !near(float64(got)/1e3, m.PerMessageUs, 1e-6) {
			t.Errorf("%d lanes: %s per message, want the measured %gµs", m.Lanes, got, m.PerMessageUs)
		}
	}
	for lanes := 2; lanes <= planner.MaxPartitions; lanes++ {
		if c.CPUPerMessage(lanes) < c.CPUPerMessage(lanes-1) || c.Ceiling(lanes) > c.Ceiling(lanes-1) {
			t.Fatalf("%d lanes: %s per message (%d lanes %s), ceiling %.0f/s (%.0f/s)", lanes, c.CPUPerMessage(lanes), lanes-1, c.CPUPerMessage(lanes-1), c.Ceiling(lanes), c.Ceiling(lanes-1))
		}
	}
	if c.Ceiling(planner.MaxPartitions) > c.Ceiling(16)/10 {
		t.Errorf("the most lanes serve %.0f/s against %.0f/s with 16: the measured curve falls more than that", c.Ceiling(planner.MaxPartitions), c.Ceiling(16))
	}
	if c.WithCores(0).On() || !c.WithCores(8).On() || !near(c.WithCores(8).Ceiling(16), 8/c.CPUPerMessage(16).Seconds(), 1e-9) {
		t.Error("WithCores")
	}
	if (model.ServerCost{Cores: 1}).On() {
		t.Error("a term without a curve is on")
	}
	falling := model.ServerCost{Cores: 1, Curve: planner.ServerCPUCurve{{Lanes: 1, PerMessageUs: 10, Cores: 1}, {Lanes: 10, PerMessageUs: 5, Cores: 1}}}
	if _, err := model.RunSweep(context.Background(), model.SweepConfig{From: 1, To: 2, Server: falling}); err == nil || !strings.Contains(err.Error(), "is below") {
		t.Errorf("a curve that falls: %v", err)
	}
	s := sweepServer(t, model.Target{Rate: 1000}, 1, fixed(10*ms))
	if s.Server == nil || s.Server.Cores != 1 || len(s.Server.Curve) != 2 || !s.ServerBound() {
		t.Fatalf("the sweep's server term for scripts: %+v", s.Server)
	}
	if p := s.Points[6]; p.Limit != model.LimitServer || !near(p.ServerCPUus, 800, 1e-6) || !near(p.Capacity, 1250, 1e-6) {
		t.Fatalf("64 lanes: %+v, want 800µs a message and 1250/s by the server", p)
	}
	if !strings.Contains(s.Verdict, "The server's CPU bounds the points limited by server") {
		t.Fatalf("verdict: %s", s.Verdict)
	}
}

// A lane with K keys in flight is what the planner makes: pinned, max
// ack pending K; K=1 is a serial lane again.
func TestLaneWithKeysInFlight(t *testing.T) {
	l := lane(30 * time.Second).WithKeysInFlight(32)
	if l.KeysInFlight != 32 || l.MaxAckPending != 32 || !l.Pinned || l.PinnedTTL != 2*time.Minute {
		t.Fatalf("%+v", l)
	}
	if s := l.WithKeysInFlight(1); s.KeysInFlight != 1 || s.MaxAckPending != 1 {
		t.Fatalf("%+v", s)
	}
	unordered := model.Lane{AckWait: time.Second, MaxDeliver: -1, MaxAckPending: 4}
	if s := unordered.WithKeysInFlight(1); s.MaxAckPending != 4 {
		t.Fatalf("a serial design's own max ack pending changed: %+v", s)
	}
}
