package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/record"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

var simulateFormats = []string{"table", "json"}

// The seed story: what lanes simulate runs with no arguments.
var (
	seedKeys       = []string{"alice", "bob", "carol"}
	seedStrategies = []strategy.Strategy{strategy.Single, strategy.Lanes}
)

const (
	defaultMessages = 1000
	defaultKeys     = "uniform:100"
	defaultProcess  = "10ms"
	catWorkload     = "Workload"
	catStrategy     = "Strategies and workers"
	catSweep        = "Sweep (model only)"
	catLive         = "Live run"
	catLease        = "kv-lease strategy"
)

// SimulateOptions is everything lanes simulate needs, validated.
type SimulateOptions struct {
	IO   *IO
	Plan *planner.Plan
	// CommandLine is the command as the user typed it (lanes simulate
	// and its flags), for the hint that suggests the next one.
	CommandLine []string
	// SeedStory: no design and no keys were given: the seed design, its
	// keys (alice, bob, carol) and single versus lanes.
	SeedStory  bool
	Strategies []strategy.Strategy
	// Keys is uniform:K, zipf:K:S or file:PATH; empty means the default
	// (the seed's keys, or uniform:100), unless FromStream is set.
	Keys       string
	FromStream string
	Messages   int
	Rate       float64 // per second, 0 = all at once
	Process    workload.Process
	Workers    int // per lane
	Crash      float64
	InProgress bool
	Seed       uint64
	SweepFrom  int // 0: no sweep
	SweepTo    int
	Target     model.Target
	PlotPath   string
	PlotFormat string
	Live       bool
	Keep       bool
	// Lease and RoundTrip are the kv-lease strategy's settings (RoundTrip
	// for the model only: the live run has real ones).
	Lease     strategy.LeaseSettings
	RoundTrip time.Duration
	Conn      connect.Options
	Output    string
}

func simulateCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&cli.StringFlag{Name: "strategy", Usage: strategyUsage(), Category: catStrategy},
		&cli.IntFlag{Name: "workers", Value: 1, Usage: "workers per lane `N`; every strategy gets partitions x N workers", Category: catStrategy},
		&cli.BoolFlag{Name: "in-progress", Usage: "workers send in-progress acks every ack_wait/3, so slow work is not redelivered (kv-lease: and renew their lease)", Category: catStrategy},
		&cli.StringFlag{Name: "keys", Usage: "key distribution `SPEC`: uniform:K, zipf:K:S, or file:PATH (one subject or bare key per line, optional count)", Category: catWorkload},
		&cli.StringFlag{Name: "from-stream", Usage: "take the keys and their weights from the per-subject message counts of stream `NAME` (needs a server)", Category: catWorkload},
		&cli.IntFlag{Name: "messages", Value: defaultMessages, Usage: "messages to publish `N`", Category: catWorkload},
		&cli.Float64Flag{Name: "rate", Usage: "publish rate, messages `PER_SECOND`; 0 publishes everything at once (a backlog)", Category: catWorkload},
		&cli.StringFlag{Name: "process-time", Value: defaultProcess, Usage: "processing time `DIST`: 10ms (fixed), exp:10ms (exponential mean), lognormal:P50:P99", Category: catWorkload},
		&cli.Float64Flag{Name: "crash", Usage: "probability `P` that a worker dies in the middle of a message (it is replaced at once)", Category: catWorkload},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed `N`: the same seed gives the same workload and the same result", Category: catWorkload},
		&cli.StringFlag{Name: "sweep", Usage: "try partition counts `A..B` (lanes strategy) and recommend one", Category: catSweep},
		&cli.Float64Flag{Name: "target-rate", Usage: "sweep target: messages `PER_SECOND` to sustain", Category: catSweep},
		&cli.DurationFlag{Name: "target-p99", Usage: "sweep target: end-to-end p99 latency `DURATION`", Category: catSweep, Action: positive("target-p99")},
		&cli.StringFlag{Name: "plot", Usage: "write the sweep chart to `FILE` (.png or .svg)", Category: catSweep},
		&cli.BoolFlag{Name: "live", Usage: "run on a real server too (the connection flags', or an embedded one) and show it beside the model", Category: catLive},
		&cli.BoolFlag{Name: "keep", Usage: "with --live: keep the stream and lanes it created", Category: catLive},
		&cli.DurationFlag{Name: "lease-ttl", Value: strategy.DefaultLeaseTTL, Usage: "the per-key lease's time to live `DURATION` (whole seconds, 1s or more); with --in-progress the holder renews it every TTL/3", Category: catLease},
		&cli.DurationFlag{Name: "lease-retry", Usage: "the nak delay `DURATION` of a message whose key another worker has leased: it is delivered again after it", DefaultText: "half the mean processing time, 10ms or more", Category: catLease, Action: positive("lease-retry")},
		&cli.DurationFlag{Name: "round-trip", Value: model.DefaultRoundTrip, Usage: "the model's time `DURATION` for a request to the server and its answer: taking a lease costs 1 to 3 (KeyValue.Create), releasing it 1", Category: catLease},
		outputFlag(simulateFormats...),
	)
	flags = append(flags, connectFlags()...)
	return withUsageErrors(&cli.Command{
		Name:  "simulate",
		Usage: "predict a design's throughput, latency and order, then prove it live",
		UsageText: "lanes simulate [design flags | -f FILE] [--strategy LIST] [--keys uniform:K|zipf:K:S|file:PATH] [--from-stream NAME]\n" +
			"   [--messages N] [--rate R] [--process-time D|exp:D|lognormal:P50:P99] [--ack-wait D] [--workers N] [--crash P]\n" +
			"   [--in-progress] [--seed N] [--sweep A..B --target-rate R --target-p99 D --plot FILE] [--live [--keep]]\n" +
			"   [--lease-ttl D] [--lease-retry D] [--round-trip D] [-o table|json]",
		Description: `Run the same workload through several ways of consuming it and compare
throughput, latency, per-key order, duplicates and final state:

` + strategyList() + `
Every strategy gets the same workers: partitions x --workers. kv-lease runs
when named (--strategy lanes,kv-lease). The model is a deterministic
discrete-event simulation of JetStream pull consumers (ack wait, late acks,
redelivery, max deliver, in-progress acks, backoff, pinned workers, leases);
--live runs it on a real server and shows both.
The design is read as plan reads it (-f FILE, the design flags, else
$LANES_FILE or ./lanes.yaml, named on stderr). With no design at all: the
seed story (alice, bob and carol; single vs 8 lanes).

Examples:
   lanes simulate
   lanes simulate -f lanes.yaml --keys zipf:10000:1.1 --rate 2000 --process-time lognormal:5ms:80ms
   lanes simulate --partitions 16 --workers 2 --ack-wait 50ms --process-time 80ms          # duplicates
   lanes simulate --partitions 16 --workers 2 --ack-wait 50ms --process-time 80ms --in-progress
   lanes simulate -f lanes.yaml --keys file:keys.txt --sweep 1..64 --target-rate 5000 --target-p99 200ms --plot sweep.png
   lanes simulate -f lanes.yaml --from-stream ORDERS --server nats://host:4222
   lanes simulate --live                                                                   # embedded server
   lanes simulate --strategy lanes,kv-lease --keys zipf:200:1.1 --process-time 20ms        # the lease alternative
   lanes simulate -o json | jq '.results[] | {strategy, throughput, order_violations}'`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			opts, err := simulateOptions(c, io)
			if err != nil {
				return err
			}
			return runSimulate(c.Context, opts)
		},
	})
}

// simulateOptions turns flags into validated options: every bad value is a
// usage error (exit 2) that names its flag.
func simulateOptions(c *cli.Context, io *IO) (SimulateOptions, error) {
	if c.NArg() > 0 {
		return SimulateOptions{}, usageErrorf("simulate takes no arguments (got %q); see lanes simulate --help", c.Args().First())
	}
	if err := notEmpty(c, "keys", "from-stream", "strategy", "sweep", "plot", "process-time"); err != nil {
		return SimulateOptions{}, err
	}
	if c.String("keys") == "file:"+input.Stdin && c.String("file") == input.Stdin {
		return SimulateOptions{}, usageErrorf("-f - and --keys file:- both read stdin: give one of them a file")
	}
	o := SimulateOptions{IO: io, CommandLine: typedCommand(c), Keys: c.String("keys"), FromStream: c.String("from-stream"), Messages: c.Int("messages"),
		Rate: c.Float64("rate"), Workers: c.Int("workers"), Crash: c.Float64("crash"), InProgress: c.Bool("in-progress"),
		Seed: c.Uint64("seed"), Target: model.Target{Rate: c.Float64("target-rate"), P99: c.Duration("target-p99")},
		PlotPath: c.String("plot"), Live: c.Bool("live"), Keep: c.Bool("keep"), Conn: connectOptions(c)}
	var err error
	if o.Output, err = outputFormat(c, simulateFormats...); err != nil {
		return o, err
	}
	if o.Process, err = workload.ParseProcess(c.String("process-time")); err != nil {
		return o, badInput(err)
	}
	if err := o.parseSweep(c.String("sweep")); err != nil {
		return o, err
	}
	o.Lease = strategy.LeaseSettings{TTL: c.Duration("lease-ttl"), Retry: c.Duration("lease-retry")}
	if o.Lease.Retry == 0 {
		o.Lease.Retry = strategy.DefaultLeaseRetry(o.Process.Average())
	}
	o.RoundTrip = c.Duration("round-trip")
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.Keep && !o.Conn.Given() {
		fmt.Fprintln(io.Err, "warning: --keep keeps nothing here: with no server named (--server, NATS_URL or --context) the run uses an embedded nats-server that goes away with it")
	}
	d, err := readDesign(c)
	if err != nil {
		return o, err
	}
	if d.Subject == "" {
		d = seedDesign(d)
		o.SeedStory = o.Keys == "" && o.FromStream == ""
	}
	if o.SweepFrom > 0 && d.Destination != "" {
		return o, usageErrorf("--sweep varies the partition count, but the design adopts a fixed destination %q", d.Destination)
	}
	if o.Plan, err = planWithWarnings(d, io); err != nil {
		return o, err
	}
	if err := o.checkSize(0); err != nil {
		return o, err
	}
	if o.Strategies, err = parseStrategies(c.String("strategy"), o.SeedStory); err != nil {
		return o, err
	}
	return o, o.checkLease(c)
}

// checkLease refuses the kv-lease settings without the strategy, and a
// lease TTL the server cannot hold.
func (o SimulateOptions) checkLease(c *cli.Context) error {
	leasing := slices.ContainsFunc(o.Strategies, func(s strategy.Strategy) bool { return s.Model == strategy.Lease })
	for _, f := range []string{"lease-ttl", "lease-retry", "round-trip"} {
		if c.IsSet(f) && !leasing {
			return usageErrorf("--%s belongs to the kv-lease strategy: add --strategy kv-lease", f)
		}
	}
	switch ttl := o.Lease.TTL; {
	case ttl < time.Second || ttl%time.Second != 0:
		return usageErrorf("--lease-ttl %s: must be whole seconds, 1s or more (the server's per-key TTLs)", ttl)
	case o.RoundTrip < 0:
		return usageErrorf("--round-trip %s: cannot be negative", o.RoundTrip)
	}
	return nil
}

// workers is every strategy's worker count: the most partitions tried
// times the workers per lane.
func (o SimulateOptions) workers() int {
	return max(o.Plan.Design.Partitions, o.SweepTo) * o.Workers
}

// checkSize refuses a simulation too large to hold, before any of it is
// allocated; keys is 0 while the keys are not read yet.
func (o SimulateOptions) checkSize(keys int) error {
	if o.Workers > planner.MaxSimWorkers {
		return usageErrorf("--workers %d: a simulation runs at most %d workers in all", o.Workers, planner.MaxSimWorkers)
	}
	if err := workload.CheckSize(o.Messages, keys, o.workers()); err != nil {
		return badInput(err)
	}
	return nil
}

// seedDesign fills in the seed case when no design is given: updates for users on
// msgs.received_from.<user>, the user is the key, 8 lanes. Design flags
// given alongside (e.g. --partitions) still apply.
func seedDesign(d planner.Design) planner.Design {
	d.Subject = "msgs.received_from.*"
	if d.Name == "" && d.Stream.Name == "" {
		d.Name = "orders"
	}
	return d
}

func (o *SimulateOptions) validate() error {
	switch {
	case o.Messages < 1:
		return usageErrorf("--messages %d: must be at least 1", o.Messages)
	case o.Rate < 0:
		return usageErrorf("--rate %g: must be 0 (all at once) or a positive rate per second", o.Rate)
	case o.Workers < 1:
		return usageErrorf("--workers %d: must be at least 1 worker per lane", o.Workers)
	case o.Crash < 0 || o.Crash >= 1:
		return usageErrorf("--crash %g: must be a probability in [0, 1)", o.Crash)
	case o.Target.Rate < 0:
		return usageErrorf("--target-rate %g: must be positive", o.Target.Rate)
	case o.Target.P99 < 0:
		return usageErrorf("--target-p99 %s: must be positive", o.Target.P99)
	case o.Keys != "" && o.FromStream != "":
		return usageErrorf("--keys %q and --from-stream %q cannot be combined: choose one source of keys", o.Keys, o.FromStream)
	case o.FromStream != "" && !o.Conn.Given():
		return usageErrorf("--from-stream %q needs a server: give --server (or NATS_URL, --context)", o.FromStream)
	case o.FromStream != "" && planner.CheckStreamName(o.FromStream) != nil:
		return usageErrorf("--from-stream %s: %v", planner.Quote(o.FromStream, 80), planner.CheckStreamName(o.FromStream))
	case o.SweepFrom > 0 && o.Live:
		return usageErrorf("--sweep runs the model only; drop --live (run --live afterwards with the recommended --partitions)")
	case o.SweepFrom == 0 && (o.Target.Rate > 0 || o.Target.P99 > 0 || o.PlotPath != ""):
		return usageErrorf("--target-rate, --target-p99 and --plot belong to a sweep: add --sweep A..B")
	case o.Keep && !o.Live:
		return usageErrorf("--keep keeps what a live run created: add --live")
	}
	if o.PlotPath != "" {
		o.PlotFormat = strings.TrimPrefix(strings.ToLower(filepath.Ext(o.PlotPath)), ".")
		if !slices.Contains(render.PlotFormats, o.PlotFormat) {
			return usageErrorf("--plot %q: the file name must end in .png or .svg", o.PlotPath)
		}
	}
	return nil
}

// parseSweep reads "A..B" (or a single count "N").
func (o *SimulateOptions) parseSweep(s string) error {
	if s == "" {
		return nil
	}
	from, to, found := strings.Cut(s, "..")
	if !found {
		to = from
	}
	a, errA := strconv.Atoi(strings.TrimSpace(from))
	b, errB := strconv.Atoi(strings.TrimSpace(to))
	switch {
	case errA != nil || errB != nil:
		return usageErrorf("--sweep %q: write a range of partition counts like 1..64", s)
	case a < 1 || b < a:
		return usageErrorf("--sweep %q: the range must start at 1 or more and not run backwards", s)
	case b > planner.MaxPartitions:
		return usageErrorf("--sweep %q: at most %d partitions", s, planner.MaxPartitions)
	}
	o.SweepFrom, o.SweepTo = a, b
	return nil
}

// strategyUsage and strategyList describe the registry's strategies.
func strategyUsage() string {
	return fmt.Sprintf("strategies to compare, a `LIST` of %s (default: %s; single,lanes for the seed story)",
		strings.Join(strategy.Names(), ", "), strings.Join(strategy.NamesOf(strategy.Defaults()), ","))
}

func strategyList() string {
	var b strings.Builder
	width := 0
	for _, s := range strategy.All {
		width = max(width, len(s.Name))
	}
	for _, s := range strategy.All {
		fmt.Fprintf(&b, "   %-*s  %s\n", width, s.Name, s.Summary)
	}
	return b.String()
}

func parseStrategies(s string, seed bool) ([]strategy.Strategy, error) {
	if s == "" {
		if seed {
			return seedStrategies, nil
		}
		return strategy.Defaults(), nil
	}
	var out []strategy.Strategy
	for _, name := range splitList(s) {
		st, ok := strategy.Lookup(name)
		if !ok {
			return nil, usageErrorf("--strategy %q: unknown strategy %q; choose from %s", s, strings.ToLower(name), strings.Join(strategy.Names(), ", "))
		}
		if !slices.ContainsFunc(out, func(o strategy.Strategy) bool { return o.Name == st.Name }) {
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, usageErrorf("--strategy %q: name at least one strategy", s)
	}
	return out, nil
}

// runSimulate builds the workload and runs the model (and the live run, or
// a sweep), then renders the result in the chosen format.
func runSimulate(ctx context.Context, o SimulateOptions) error {
	keys, from, err := simulationKeys(ctx, o)
	if err != nil {
		return err
	}
	if err := o.checkSize(len(keys.Names)); err != nil {
		return err
	}
	spec := workload.Spec{Keys: keys, Messages: o.Messages, Rate: o.Rate, Process: o.Process, Crash: o.Crash, Seed: o.Seed}
	w, err := workload.Generate(spec)
	if err != nil {
		return badInput(err)
	}
	info := workloadInfo(o, w, from)
	if o.SweepFrom > 0 {
		return runSweep(ctx, o, spec, info)
	}
	sim := render.Simulation{Mode: "model", Design: o.Plan.Design.Name, Subject: o.Plan.Design.Subject,
		Partitions: o.Plan.Design.Partitions, WorkersPerLane: o.Workers, Workload: info, LaneNames: simLaneNames(o.Plan)}
	predictions, err := modelResults(ctx, o, w)
	if err != nil {
		return err
	}
	var liveErr error
	var laneReport *health.Report
	if o.Live {
		sim.Mode = "live"
		sim.Results, laneReport, sim.Server, liveErr = liveResults(ctx, o, w, predictions)
		if liveErr != nil && len(sim.Results) == 0 {
			return liveErr
		}
	} else {
		for _, r := range predictions {
			sim.Results = append(sim.Results, render.StrategyResult{Result: r})
		}
	}
	if o.Output == "json" {
		err = render.JSON(o.IO.Out, sim)
	} else {
		st := render.NewStyles(o.IO.Out)
		err = render.SimulationTable(o.IO.Out, st, sim)
		if err == nil && laneReport != nil {
			fmt.Fprintln(o.IO.Out, "\n"+st.Heading.Render("Lanes on the server after the run (lanes inspect)"))
			err = render.InspectTable(o.IO.Out, st, laneReport)
		}
		if err == nil && o.SeedStory && !o.Live {
			fmt.Fprintf(o.IO.Err, "\nnext: %s   (the same on a real nats-server: %s)\n", shellLine(append(o.CommandLine, "--live")), liveServerWords(o))
		}
	}
	return errors.Join(liveErr, err) // a stopped live run still reports what it saw
}

// modelResults runs the model once per strategy on the same workload.
func modelResults(ctx context.Context, o SimulateOptions, w *workload.Workload) ([]record.Result, error) {
	parts, err := keyPartitions(o.Plan, w.Spec.Keys)
	if err != nil {
		return nil, err
	}
	var out []record.Result
	for _, s := range o.Strategies {
		cfg := modelConfig(o, s, o.Plan.Design.Partitions, parts)
		r, err := model.Run(ctx, w, cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func modelConfig(o SimulateOptions, st strategy.Strategy, partitions int, keyPartition []int) model.Config {
	l := o.Plan.Design.Lane
	lane := model.Lane{AckWait: l.AckWait.D(), MaxDeliver: l.MaxDeliver, MaxAckPending: l.MaxAckPending,
		Pinned: l.Pinned, PinnedTTL: l.PinnedTTL.D()}
	for _, b := range l.BackOff {
		lane.BackOff = append(lane.BackOff, b.D())
	}
	return model.Config{Strategy: st, Partitions: partitions, WorkersPerLane: o.Workers,
		KeyPartition: keyPartition, Lane: lane, InProgress: o.InProgress, Lease: o.Lease, RoundTrip: o.RoundTrip}
}

// keyPartitions places every workload key with the planner's hash, the
// server's partition function.
func keyPartitions(p *planner.Plan, keys workload.Keys) ([]int, error) {
	out := make([]int, len(keys.Subjects))
	for i, s := range keys.Subjects {
		part, ok := p.Layout.PartitionOf([]byte(s))
		if !ok {
			return nil, usageErrorf("key subject %q does not match the design's subject %s", s, p.Design.Subject)
		}
		out[i] = part
	}
	return out, nil
}

func simLaneNames(p *planner.Plan) []string {
	out := make([]string, len(p.Lanes))
	for i, l := range p.Lanes {
		out[i] = l.Name
	}
	return out
}

// runSweep runs the lanes strategy over the partition range, each count
// planned afresh (keys move between partitions as the count changes).
func runSweep(ctx context.Context, o SimulateOptions, spec workload.Spec, info render.WorkloadInfo) error {
	sc := model.SweepConfig{
		From: o.SweepFrom, To: o.SweepTo, Target: o.Target, Headroom: model.DefaultHeadroom,
		Base: modelConfig(o, strategy.Lanes, o.Plan.Design.Partitions, nil),
		KeyPartition: func(n int) ([]int, error) {
			d := o.Plan.Design
			d.Partitions = n
			p, err := planner.New(d)
			if err != nil {
				return nil, err
			}
			return keyPartitions(p, spec.Keys)
		},
		Workload: func(rate float64) (*workload.Workload, error) {
			s := spec
			s.Rate = rate
			return workload.Generate(s)
		},
		Rate: spec.Rate,
	}
	sw, err := model.RunSweep(ctx, sc)
	if err != nil {
		return err
	}
	if o.PlotPath != "" {
		if err := writePlot(o, sw); err != nil {
			return err
		}
	}
	if o.Output == "json" {
		return render.JSON(o.IO.Out, render.SweepReport{Design: o.Plan.Design.Name, Subject: o.Plan.Design.Subject,
			WorkersPerLane: o.Workers, Workload: info, Sweep: sw})
	}
	fmt.Fprintln(o.IO.Out, render.NewStyles(o.IO.Out).Dim.Render(fmt.Sprintf("design %s, workers per lane %d; %s", o.Plan.Design.Name, o.Workers, render.WorkloadLine(info))))
	return render.SweepTable(o.IO.Out, render.NewStyles(o.IO.Out), sw)
}

func writePlot(o SimulateOptions, sw model.Sweep) error {
	f, err := os.Create(o.PlotPath)
	if err != nil {
		return usageErrorf("--plot: %v", err)
	}
	if err := render.SweepPlot(f, o.PlotFormat, sw); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "wrote the sweep chart to %s\n", o.PlotPath)
	return nil
}

func workloadInfo(o SimulateOptions, w *workload.Workload, from string) render.WorkloadInfo {
	l := o.Plan.Design.Lane
	info := render.WorkloadInfo{Messages: len(w.Messages), Keys: len(w.Spec.Keys.Names), KeysFrom: from,
		Rate: o.Rate, ProcessTime: o.Process.String(), AckWait: l.AckWait.String(), MaxDeliver: l.MaxDeliver,
		InProgress: o.InProgress, Crash: o.Crash, Seed: o.Seed}
	if len(l.BackOff) > 0 {
		steps := make([]string, len(l.BackOff))
		for i, b := range l.BackOff {
			steps[i] = b.String()
		}
		info.AckWait = "backoff " + strings.Join(steps, ",")
	}
	if slices.ContainsFunc(o.Strategies, func(s strategy.Strategy) bool { return s.Model == strategy.Lease }) {
		info.LeaseTTL, info.LeaseRetry, info.RoundTrip = o.Lease.TTL.String(), o.Lease.Retry.String(), o.RoundTrip.String()
	}
	if n := len(w.Spec.Keys.Names); n <= 5 {
		for _, k := range w.Spec.Keys.Names { // from a file or a stream: escaped for the terminal
			info.KeySample = append(info.KeySample, planner.Printable(k, 80))
		}
	}
	return info
}

// liveServerWords says which server --live would use with these options.
func liveServerWords(o SimulateOptions) string {
	if o.Conn.Given() {
		return "the one the connection flags, NATS_URL or the natscli context name"
	}
	return "an embedded one, no setup"
}
