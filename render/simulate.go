package render

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim"
	"github.com/lanes-dev/lanes/sim/figure"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// SimulationTable prints the heading, the speed and correctness tables,
// the lanes strategy's per-lane load, and a verdict per strategy. A live
// run shows every figure next to the model's prediction instead, and the
// lane table read on the server after the run.
func SimulationTable(w io.Writer, s Styles, r sim.Report) error {
	fmt.Fprintln(w, s.Heading.Render(simHeading(r)))
	fmt.Fprintln(w, "  "+s.Dim.Render(workloadLine(r.Workload)))
	fmt.Fprintln(w)
	if r.Mode == "live" {
		if err := liveTable(w, r.Results); err != nil {
			return err
		}
	} else {
		if err := speedTable(w, r); err != nil {
			return err
		}
		fmt.Fprintln(w)
		if err := correctnessTable(w, r.Results); err != nil {
			return err
		}
	}
	for _, res := range r.Results {
		if perPartition(res.Strategy) && len(res.Lanes) > 0 {
			fmt.Fprintln(w)
			if err := laneLoadTable(w, s, res.Result, r.LaneNames); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, s.Heading.Render("Verdict"))
	for _, v := range r.Verdicts {
		fmt.Fprintln(w, "  "+v)
	}
	if r.Lanes != nil {
		fmt.Fprintln(w, "\n"+s.Heading.Render("Lanes on the server after the run (lanes inspect)"))
		return InspectTable(w, s, r.Lanes)
	}
	return nil
}

func simHeading(r sim.Report) string {
	mode := "Model"
	if r.Mode == "live" {
		where := "an embedded nats-server"
		if r.Server != "" && r.Server != "embedded" {
			where = planner.Printable(r.Server, 200)
		}
		mode = "Live run on " + where + " (model's prediction beside each figure)"
	}
	keyed := ""
	if r.KeysInFlight > 1 {
		keyed = fmt.Sprintf(", %d keys in flight per lane", r.KeysInFlight)
	}
	n := r.Partitions * r.WorkersPerLane
	return fmt.Sprintf("%s: design %s, %d %s x %d %s%s (%d %s per strategy)", mode, r.Design,
		r.Partitions, figure.Plural(r.Partitions, "lane", "lanes"), r.WorkersPerLane, figure.Plural(r.WorkersPerLane, "worker", "workers"),
		keyed, n, figure.Plural(n, "worker", "workers"))
}

// workloadLine describes the workload in one line.
func workloadLine(wl sim.WorkloadInfo) string {
	keys := wl.KeysFrom
	if len(wl.KeySample) > 0 && len(wl.KeySample) == wl.Keys {
		keys = strings.Join(wl.KeySample, ", ")
	}
	arrival := "all at once"
	if wl.Rate > 0 {
		arrival = figure.Rate(wl.Rate)
	}
	parts := []string{
		fmt.Sprintf("%d messages on %d %s (%s)", wl.Messages, wl.Keys, figure.Plural(wl.Keys, "key", "keys"), keys),
		arrival,
		"processing " + wl.ProcessTime,
		"ack wait " + wl.AckWait,
	}
	if wl.InProgress {
		parts = append(parts, "in-progress acks")
	}
	if wl.Crash > 0 {
		parts = append(parts, fmt.Sprintf("crash %g", wl.Crash))
	}
	if wl.FailingKey != "" {
		parts = append(parts, fmt.Sprintf("%s's first message fails %d %s", planner.Printable(wl.FailingKey, 80), wl.FailingAttempts, figure.Plural(wl.FailingAttempts, "attempt", "attempts")))
	}
	if wl.MaxDeliver > 0 {
		parts = append(parts, fmt.Sprintf("max deliver %d", wl.MaxDeliver))
	}
	if wl.LeaseTTL != "" {
		parts = append(parts, fmt.Sprintf("lease TTL %s, retry %s, round trip %s", wl.LeaseTTL, wl.LeaseRetry, wl.RoundTrip))
	}
	parts = append(parts, fmt.Sprintf("seed %d", wl.Seed))
	return strings.Join(parts, ", ")
}

func speedTable(w io.Writer, rep sim.Report) error {
	t := newTable(w, "STRATEGY", "THROUGHPUT", "P50", "P99", "MAX", "DRAIN", "HOTTEST LANE", "HOTTEST KEY")
	for _, r := range rep.Results {
		if err := t.Append([]string{r.Strategy, figure.Rate(r.Throughput), figure.Millis(r.LatencyP50ms), figure.Millis(r.LatencyP99ms),
			figure.Millis(r.LatencyMaxms), figure.Millis(r.DrainSeconds * 1000), simHottestLane(r.Result, rep.LaneNames),
			fmt.Sprintf("%s (%s)", r.HottestKey, figure.Share(r.HottestKeyShare))}); err != nil {
			return err
		}
	}
	return t.Render()
}

func correctnessTable(w io.Writer, results []sim.StrategyResult) error {
	t := newTable(w, "STRATEGY", "ORDER VIOLATIONS", "DUPLICATES", "REDELIVERIES", "CRASHES", "UNFINISHED", "FINAL STATE")
	for _, r := range results {
		if err := t.Append([]string{r.Strategy, strconv.Itoa(r.OrderViolations), strconv.Itoa(r.Duplicates),
			strconv.Itoa(r.Redeliveries), strconv.Itoa(r.Crashes), strconv.Itoa(r.Unfinished), simFinalState(r.Result)}); err != nil {
			return err
		}
	}
	return t.Render()
}

// liveTable puts figures in rows and, per strategy, the live value and the
// model's prediction in adjacent columns.
func liveTable(w io.Writer, results []sim.StrategyResult) error {
	headers := []string{"FIGURE"}
	for _, r := range results {
		headers = append(headers, r.Strategy, "(model)")
	}
	t := newTable(w, headers...)
	rows := []struct {
		name string
		f    func(judge.Result) string
	}{
		{"throughput", func(r judge.Result) string { return figure.Rate(r.Throughput) }},
		{"latency p50", func(r judge.Result) string { return figure.Millis(r.LatencyP50ms) }},
		{"latency p99", func(r judge.Result) string { return figure.Millis(r.LatencyP99ms) }},
		{"latency max", func(r judge.Result) string { return figure.Millis(r.LatencyMaxms) }},
		{"drain", func(r judge.Result) string { return figure.Millis(r.DrainSeconds * 1000) }},
		{"completed", func(r judge.Result) string { return strconv.Itoa(r.Completed) }},
		{"order violations", func(r judge.Result) string { return strconv.Itoa(r.OrderViolations) }},
		{"duplicates", func(r judge.Result) string { return strconv.Itoa(r.Duplicates) }},
		{"redeliveries", func(r judge.Result) string { return strconv.Itoa(r.Redeliveries) }},
		{"crashes", func(r judge.Result) string { return strconv.Itoa(r.Crashes) }},
		{"final state", simFinalState},
		{"hottest lane share", func(r judge.Result) string { return figure.Share(r.HottestLaneShare) }},
	}
	if slices.ContainsFunc(results, func(r sim.StrategyResult) bool { return leasing(r.Strategy) }) {
		rows = append(rows, []struct {
			name string
			f    func(judge.Result) string
		}{
			{"lease retries", func(r judge.Result) string { return simLeaseFigure(r, r.LeaseRetries) }},
			{"leases lost", func(r judge.Result) string { return simLeaseFigure(r, r.LeasesLost) }},
		}...)
	}
	for _, row := range rows {
		cells := []string{row.name}
		for _, r := range results {
			prediction := "-"
			if r.Model != nil {
				prediction = row.f(*r.Model)
			}
			cells = append(cells, row.f(r.Result), prediction)
		}
		if err := t.Append(cells); err != nil {
			return err
		}
	}
	return t.Render()
}

// simMaxLaneRows bounds the per-lane table; beyond it the busiest lanes show.
const simMaxLaneRows = 32

func laneLoadTable(w io.Writer, s Styles, r judge.Result, names []string) error {
	fmt.Fprintln(w, s.Heading.Render("Lanes: utilization and peak backlog"))
	lanes := slices.Clone(r.Lanes)
	hidden := 0
	if len(lanes) > simMaxLaneRows {
		slices.SortStableFunc(lanes, func(a, b judge.LaneResult) int { return b.Messages - a.Messages })
		hidden = len(lanes) - simMaxLaneRows/2
		lanes = lanes[:simMaxLaneRows/2]
		slices.SortFunc(lanes, func(a, b judge.LaneResult) int { return a.Lane - b.Lane })
	}
	peak, total := 0, 0
	for _, l := range r.Lanes {
		peak = max(peak, l.PeakBacklog)
		total += l.Messages
	}
	mean := float64(total) / float64(len(r.Lanes))
	t := newTable(w, "LANE", "MESSAGES", "UTILIZATION", "", "PEAK BACKLOG", "")
	for _, l := range lanes {
		hot := float64(l.Messages) > 1.5*mean
		if err := t.Append([]string{simLaneName(l.Lane, names), strconv.Itoa(l.Messages),
			figure.Share(l.Utilization), s.Bar(l.Utilization, 1, 20, hot || l.Utilization > 0.9),
			strconv.Itoa(l.PeakBacklog), s.Bar(float64(l.PeakBacklog), float64(peak), 20, hot)}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if hidden > 0 {
		fmt.Fprintln(w, "  "+s.Dim.Render(fmt.Sprintf("the %d busiest lanes of %d shown; -o json has every lane", len(lanes), len(r.Lanes))))
	}
	return nil
}

// perPartition: the strategy has a lane per partition (a per-lane table).
func perPartition(name string) bool {
	st, ok := strategy.Lookup(name)
	return ok && st.Consumers == strategy.PerPartition
}

// leasing: the strategy takes a lease per key.
func leasing(name string) bool {
	st, ok := strategy.Lookup(name)
	return ok && st.Model == strategy.Lease
}

// simLeaseFigure is a lease figure, "-" for strategies without leases.
func simLeaseFigure(r judge.Result, n int) string {
	if !leasing(r.Strategy) {
		return "-"
	}
	return strconv.Itoa(n)
}

func simFinalState(r judge.Result) string {
	if r.FinalStateCorrect {
		return "right"
	}
	return "wrong"
}

func simHottestLane(r judge.Result, names []string) string {
	if !perPartition(r.Strategy) {
		return "(one shared consumer)"
	}
	return fmt.Sprintf("%s (%s)", simLaneName(r.HottestLane, names), figure.Share(r.HottestLaneShare))
}

func simLaneName(i int, names []string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return strconv.Itoa(i)
}

// SweepReportTable prints the design and the workload in one line, then
// the sweep (SweepTable).
func SweepReportTable(w io.Writer, s Styles, r sim.SweepReport) error {
	fmt.Fprintln(w, s.Dim.Render(fmt.Sprintf("design %s, workers per lane %d; %s", r.Design, r.WorkersPerLane, workloadLine(r.Workload))))
	return SweepTable(w, s, r.Sweep)
}

// SweepTable prints one row per partition count (and keys in flight)
// with capacity and p99 bars (the terminal chart) and the recommendation.
// When the sweep tried key-parallel lanes, or the server's CPU bounds a
// point, the rows also say the keys in flight, the server's CPU per
// message and what bounds the capacity.
func SweepTable(w io.Writer, s Styles, sw model.Sweep) error {
	wide := sw.Keyed() || sw.ServerBound()
	title := fmt.Sprintf("Sweep: lanes strategy, %s partitions", sw.Counts())
	if sw.Keyed() {
		title += " x keys in flight " + strings.Join(itoas(sw.KeysInFlight), ", ")
	}
	fmt.Fprintln(w, s.Heading.Render(title))
	load := "latency measured on a backlog (all at once)"
	if sw.LoadRate > 0 {
		load = "latency measured with arrivals at " + figure.Rate(sw.LoadRate)
	}
	capacity := "capacity = rate a backlog drains at; "
	if wide && sw.Server != nil {
		capacity = fmt.Sprintf("capacity = rate a backlog drains at, at most what the server serves on %s %s; ",
			strconv.FormatFloat(sw.Server.Cores, 'g', -1, 64), figure.Plural(int(math.Ceil(sw.Server.Cores)), "core", "cores"))
	}
	fmt.Fprintln(w, "  "+s.Dim.Render(capacity+load))
	fmt.Fprintln(w)
	topCap, topP99 := 0.0, 0.0
	for _, p := range sw.Points {
		topCap = max(topCap, p.Capacity)
		if !p.Overloaded {
			topP99 = max(topP99, p.LatencyP99ms)
		}
	}
	bar := 24
	headers := []string{"PARTITIONS", "CAPACITY", "", "P99", "", "HOTTEST LANE", ""}
	if wide {
		bar = 16
		headers = []string{"PARTITIONS"}
		if sw.Keyed() {
			headers = append(headers, "KEYS IN FLIGHT")
		}
		headers = append(headers, "CAPACITY", "", "P99", "", "HOTTEST LANE")
		if sw.Server != nil {
			headers = append(headers, "SERVER CPU/MSG")
		}
		headers = append(headers, "LIMIT", "")
	}
	t := newTable(w, headers...)
	for _, p := range sw.Points {
		mark := ""
		switch {
		case p.Partitions == sw.Recommended && (!sw.Keyed() || p.KeysInFlight == sw.RecommendedKeysInFlight):
			mark = s.Good.Render("<- recommended")
		case p.Meets:
			mark = s.Dim.Render("meets")
		}
		row := []string{strconv.Itoa(p.Partitions)}
		if wide && sw.Keyed() {
			row = append(row, strconv.Itoa(p.KeysInFlight))
		}
		p99, p99Bar := figure.Millis(p.LatencyP99ms), s.Bar(p.LatencyP99ms, topP99, bar, sw.TargetP99 > 0 && p.LatencyP99ms > sw.TargetP99)
		if p.Overloaded {
			p99, p99Bar = "grows", s.Warn.Render("(the server falls behind)")
		}
		row = append(row, figure.Rate(p.Capacity), s.Bar(p.Capacity, topCap, bar, false), p99, p99Bar, figure.Share(p.HottestLaneShare))
		if wide {
			if sw.Server != nil {
				row = append(row, fmt.Sprintf("%.0fµs", p.ServerCPUus))
			}
			limit := p.Limit
			if p.Limit == model.LimitServer {
				limit = s.Warn.Render(limit)
			}
			row = append(row, limit)
		}
		if err := t.Append(append(row, mark)); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, sw.Verdict)
	return nil
}

func itoas(xs []int) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Itoa(x)
	}
	return out
}
