package render_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/golden"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/sim"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
)

func simLanes(counts ...int) []judge.LaneResult {
	out := make([]judge.LaneResult, len(counts))
	for i, n := range counts {
		out[i] = judge.LaneResult{Lane: i, Messages: n, Utilization: float64(n) / 350, PeakBacklog: n}
	}
	return out
}

func seedSimulation() sim.Report {
	single := judge.Result{Strategy: "single", Partitions: 1, WorkersPerLane: 8, Messages: 1000, Completed: 1000, Throughput: 100,
		LatencyP50ms: 5000, LatencyP99ms: 9900, LatencyMaxms: 10000, DrainSeconds: 10, Executions: 1000, FinalStateCorrect: true,
		HottestLane: 0, HottestLaneShare: 1, HottestKey: "carol", HottestKeyShare: 0.35, Lanes: simLanes(1000)}
	lanesRes := judge.Result{Strategy: "lanes", Partitions: 8, WorkersPerLane: 1, Messages: 1000, Completed: 1000, Throughput: 285.71,
		LatencyP50ms: 1670, LatencyP99ms: 3400, LatencyMaxms: 3500, DrainSeconds: 3.5, Executions: 1000, FinalStateCorrect: true,
		HottestLane: 2, HottestLaneShare: 0.35, HottestKey: "carol", HottestKeyShare: 0.35, Lanes: simLanes(0, 0, 350, 0, 324, 0, 0, 326)}
	unordered := judge.Result{Strategy: "unordered", Partitions: 1, WorkersPerLane: 8, Messages: 1000, Completed: 1000, Throughput: 790.2,
		LatencyP50ms: 630.5, LatencyP99ms: 1250, LatencyMaxms: 1262.3, DrainSeconds: 1.2623, OrderViolations: 912, Duplicates: 3,
		Executions: 1020, Redeliveries: 20, Crashes: 17, FinalStateCorrect: false, HottestKey: "carol", HottestKeyShare: 0.35, HottestLaneShare: 1, Lanes: simLanes(1000)}
	versioned := unordered
	versioned.Strategy, versioned.FinalStateCorrect, versioned.StaleDropped, versioned.Unfinished = "versioned", true, 119, 2
	return sim.Report{Mode: "model", Design: "orders", Subject: "msgs.received_from.*", Partitions: 8, WorkersPerLane: 1,
		Workload: sim.WorkloadInfo{Messages: 1000, Keys: 3, KeysFrom: "alice, bob, carol", KeySample: []string{"alice", "bob", "carol"},
			ProcessTime: "10ms", AckWait: "30s", MaxDeliver: -1, Crash: 0.02, Seed: 1},
		LaneNames: []string{"orders-n8-00", "orders-n8-01", "orders-n8-02", "orders-n8-03", "orders-n8-04", "orders-n8-05", "orders-n8-06", "orders-n8-07"},
		Results:   []sim.StrategyResult{{Result: single}, {Result: lanesRes}, {Result: unordered}, {Result: versioned}}}
}

// judged is r with its verdicts, as sim.Run gives them.
func judged(r sim.Report) sim.Report {
	var results []judge.Result
	for _, res := range r.Results {
		results = append(results, res.Result)
	}
	r.Verdicts = strategy.Verdicts(results)
	return r
}

func TestSimulationTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := render.SimulationTable(&b, render.PlainStyles(), judged(seedSimulation())); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "simulate.golden", b.Bytes())
}

// A live run shows each figure beside the model's prediction.
func TestLiveSimulationTableGolden(t *testing.T) {
	rep := seedSimulation()
	rep.Mode = "live"
	rep.Results = rep.Results[:2]
	for i := range rep.Results {
		prediction := rep.Results[i].Result
		rep.Results[i].Model = &prediction
		rep.Results[i].Throughput *= 0.93
		rep.Results[i].LatencyP99ms *= 1.07
	}
	var b bytes.Buffer
	if err := render.SimulationTable(&b, render.PlainStyles(), judged(rep)); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "simulate_live.golden", b.Bytes())

	b.Reset()
	if err := render.JSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	m, ok := doc.Results[1]["model"].(map[string]any)
	if !ok || doc.Results[1]["strategy"] != "lanes" || m["throughput"] != 285.71 || doc.Results[1]["throughput"] == m["throughput"] {
		t.Fatalf("live JSON must carry the live figures with the model's beside them: %v", doc.Results[1])
	}
}

// Beyond 32 lanes only the busiest 16 show.
func TestManyLanesShowTheBusiest(t *testing.T) {
	rep := seedSimulation()
	counts := make([]int, 64)
	for i := range counts {
		counts[i] = 10 + i%7
	}
	counts[40] = 300
	rep.Results = []sim.StrategyResult{{Result: judge.Result{Strategy: "lanes", Partitions: 64, Lanes: simLanes(counts...), FinalStateCorrect: true}}}
	rep.LaneNames = nil
	var b bytes.Buffer
	if err := render.SimulationTable(&b, render.PlainStyles(), judged(rep)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "the 16 busiest lanes of 64 shown") || !strings.Contains(out, "\n40 ") {
		t.Fatalf("busiest lanes not shown:\n%s", out)
	}
}

func simSweep() model.Sweep {
	sw := model.Sweep{From: 10, To: 16, TargetRate: 1000, TargetP99: 10, Headroom: 0.25, LoadRate: 1250, Recommended: 16,
		HottestKey: "k0", HottestKeyShare: 1.0 / 64, KeyCeiling: 6400}
	caps := []float64{914.3, 1066.7, 1066.7, 1280, 1280, 1280, 1600}
	p99 := []float64{2900, 1400, 410, 10.4, 13.6, 16.8, 10}
	for i := range caps {
		sw.Points = append(sw.Points, model.SweepPoint{Partitions: 10 + i, Capacity: caps[i], Throughput: 1250, LatencyP50ms: 10,
			LatencyP99ms: p99[i], HottestLaneShare: 7.0 / 64, Meets: i == 6})
	}
	sw.Verdict = model.SweepVerdict(sw)
	return sw
}

func TestSweepTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := render.SweepTable(&b, render.PlainStyles(), simSweep()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "simulate_sweep.golden", b.Bytes())
}

// keyedSweep is the comparison, as the model gives it for 1,000
// keys and a 1ms handler: 16 lanes, serial or with 64 keys in flight,
// against 1,024 serial lanes, on the default server term.
func keyedSweep() model.Sweep {
	server := model.ServerCost{Cores: 1.25, Curve: model.DefaultServerCost.Curve} // fixed: the golden frame does not follow the measured table
	sw := model.Sweep{From: 16, To: 1024, TargetRate: 20000, Headroom: 0.25, LoadRate: 25000, Recommended: 16, RecommendedKeysInFlight: 64,
		KeysInFlight: []int{1, 64}, Server: &server, HottestKey: "key-0375", HottestKeyShare: 0.0017, KeyCeiling: 588235}
	for _, p := range []model.SweepPoint{
		{Partitions: 16, KeysInFlight: 1, Capacity: 15174.5, LaneCapacity: 15174.5, ServerCeiling: 32870.5, ServerCPUus: 38.028, Limit: model.LimitLanes, LatencyP99ms: 482.84, HottestLaneShare: 0.0659},
		{Partitions: 16, KeysInFlight: 64, Capacity: 32870.5, LaneCapacity: 500000, ServerCeiling: 32870.5, ServerCPUus: 38.028, Limit: model.LimitServer, LatencyP99ms: 1.6, HottestLaneShare: 0.0659, Meets: true},
		{Partitions: 1024, KeysInFlight: 1, Capacity: 2501.5, LaneCapacity: 160000, ServerCeiling: 2501.5, ServerCPUus: 499.692, Limit: model.LimitServer, LatencyP99ms: 1.84, HottestLaneShare: 0.00625, Overloaded: true},
		{Partitions: 1024, KeysInFlight: 64, Capacity: 2501.5, LaneCapacity: 606060, ServerCeiling: 2501.5, ServerCPUus: 499.692, Limit: model.LimitServer, LatencyP99ms: 1.6, HottestLaneShare: 0.00625, Overloaded: true},
	} {
		sw.Points = append(sw.Points, p)
	}
	sw.Verdict = model.SweepVerdict(sw)
	return sw
}

// A sweep of partitions and keys in flight names K on every row, the
// server's CPU per message and what bounds each point; rows the server
// cannot keep up with say so instead of a p99.
func TestKeyedSweepTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := render.SweepTable(&b, render.PlainStyles(), keyedSweep()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "simulate_sweep_keyed.golden", b.Bytes())
}

func TestSweepPlot(t *testing.T) {
	for _, format := range render.PlotFormats {
		var b bytes.Buffer
		if err := render.SweepPlot(&b, format, simSweep()); err != nil {
			t.Fatal(err)
		}
		head := b.String()[:min(200, b.Len())]
		if format == "png" && !strings.HasPrefix(head, "\x89PNG") || format == "svg" && !strings.Contains(head, "<svg") {
			t.Fatalf("%s plot starts %q", format, head[:min(20, len(head))])
		}
	}
	if err := render.SweepPlot(&bytes.Buffer{}, "gif", simSweep()); err == nil {
		t.Fatal("gif accepted")
	}
	var b bytes.Buffer
	if err := render.SweepPlot(&b, "svg", keyedSweep()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keys in flight 1", "keys in flight 64", "recommended: 16 x 64 keys in flight"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the keyed sweep's plot lacks %q", want)
		}
	}
}

// kv-lease beside lanes in a live run: its lease figures get rows of
// their own ("-" for lanes), the heading names its settings, and its
// verdict says what the leases and the fencing token did.
func TestLiveKVLeaseTableGolden(t *testing.T) {
	rep := seedSimulation()
	rep.Mode = "live"
	rep.Workload.LeaseTTL, rep.Workload.LeaseRetry, rep.Workload.RoundTrip = "1s", "5ms", "200µs"
	lease := judge.Result{Strategy: "kv-lease", Partitions: 1, WorkersPerLane: 8, Messages: 1000, Completed: 1000, Throughput: 330.2,
		LatencyP50ms: 1500, LatencyP99ms: 2900, LatencyMaxms: 3000, DrainSeconds: 3.03, OrderViolations: 41, Executions: 1000,
		StaleDropped: 7, FinalStateCorrect: true, LeaseRetries: 5210, LeasesLost: 9, HottestLaneShare: 1, HottestKey: "carol",
		HottestKeyShare: 0.35, Lanes: simLanes(1000)}
	prediction := lease
	prediction.Throughput, prediction.LeaseRetries, prediction.LeasesLost = 341.5, 4980, 8
	lanesRes := rep.Results[1]
	lanesPrediction := lanesRes.Result
	lanesRes.Model = &lanesPrediction
	rep.Results = []sim.StrategyResult{lanesRes, {Result: lease, Model: &prediction}}
	var b bytes.Buffer
	if err := render.SimulationTable(&b, render.PlainStyles(), judged(rep)); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "simulate_lease.golden", b.Bytes())
}
