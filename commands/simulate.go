package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/progress"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/sim"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

var simulateFormats = []string{"table", "json"}

const (
	defaultMessages = 1000
	defaultProcess  = "10ms"
	catWorkload     = "Workload"
	catStrategy     = "Strategies and workers"
	catSweep        = "Sweep (model only)"
	catLive         = "Live run"
	catLease        = "kv-lease strategy"
)

// SimulateOptions is everything lanes simulate needs, validated: the
// simulation, and how to show it.
type SimulateOptions struct {
	sim.Options
	IO *IO
	// CommandLine is the command as the user typed it (lanes simulate
	// and its flags), for the hint that suggests the next one.
	CommandLine []string
	PlotPath    string
	PlotFormat  string
	Output      string
}

// runLive is the live runner; tests replace it to check what it is asked.
var runLive = live.Run

func simulateCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&choiceFlag{StringFlag: &cli.StringFlag{Name: "strategy", Usage: strategyUsage(), Category: catStrategy}, values: strategy.Names()},
		&cli.IntFlag{Name: "workers", Value: 1, Usage: "workers per lane `N`; every strategy gets partitions x N workers", Category: catStrategy},
		&cli.BoolFlag{Name: "in-progress", Usage: "workers send in-progress acks every ack_wait/3, so slow work is not redelivered (kv-lease: and renew their lease)", Category: catStrategy},
		&cli.StringFlag{Name: "keys", Usage: "key distribution `SPEC`: uniform:K, zipf:K:S, or file:PATH (one subject or bare key per line, optional count)", Category: catWorkload},
		&cli.StringFlag{Name: "from-stream", Usage: "take the keys and their weights from the per-subject message counts of stream `NAME` (needs a server)", Category: catWorkload},
		&cli.IntFlag{Name: "messages", Value: defaultMessages, Usage: "messages to publish `N`", Category: catWorkload},
		&cli.Float64Flag{Name: "rate", Usage: "publish rate, messages `PER_SECOND`; 0 publishes everything at once (a backlog)", Category: catWorkload},
		&cli.StringFlag{Name: "process-time", Value: defaultProcess, Usage: "processing time `DIST`: 10ms (fixed), exp:10ms (exponential mean), lognormal:P50:P99", Category: catWorkload},
		&cli.Float64Flag{Name: "crash", Usage: "probability `P` that a worker dies in the middle of a message (it is replaced at once)", Category: catWorkload},
		&cli.StringFlag{Name: "failing-key", Usage: "`KEY:N`: the first message of KEY fails its first N attempts (a poison message that recovers; its key's later messages wait behind it)", Category: catWorkload},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed `N`: the same seed gives the same workload and the same result", Category: catWorkload},
		&cli.StringFlag{Name: "sweep", Usage: "try partition counts `A..B` (or a list: 16,64,1024; lanes strategy) and recommend one", Category: catSweep},
		&cli.StringFlag{Name: "sweep-keys-in-flight", Usage: "try each partition count with keys in flight `LIST` (1,8,64, or A..B doubling from A) and recommend both", Category: catSweep},
		&cli.Float64Flag{Name: "server-cores", Value: model.DefaultServerCost.Cores, Usage: "the CPU `CORES` the nats-server gets: the sweep caps each point at what it can serve for that many lanes; 0 leaves the server out", Category: catSweep},
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
			"   [--in-progress] [--failing-key KEY:N] [--seed N] [--keys-in-flight K]\n" +
			"   [--sweep A..B|LIST [--sweep-keys-in-flight LIST] --target-rate R --target-p99 D --server-cores C --plot FILE] [--live [--keep]]\n" +
			"   [--lease-ttl D] [--lease-retry D] [--round-trip D] [-o table|json]",
		Description: `Run the same workload through several ways of consuming it and compare
throughput, latency, per-key order, duplicates and final state:

` + strategyList() + `
Every strategy gets the same workers: partitions x --workers. kv-lease runs
when named (--strategy lanes,kv-lease). The model is a deterministic
discrete-event simulation of JetStream pull consumers (ack wait, late acks,
redelivery, max deliver, in-progress acks, backoff, pinned workers, leases,
key-parallel lanes with --keys-in-flight); --live runs it on a real server
and shows both. A sweep recommends partitions, and with
--sweep-keys-in-flight keys in flight too: fewer lanes first, since the
server's CPU per message grows with the lane count, and never more lanes
than the server can use (--server-cores).
The design is read as plan reads it (-f FILE, the design flags, else
$LANES_FILE or ./lanes.yaml, named on stderr). With no design at all: the
seed story (alice, bob and carol; single vs 8 lanes).

Examples:
   lanes simulate
   lanes simulate -f lanes.yaml --keys zipf:10000:1.1 --rate 2000 --process-time lognormal:5ms:80ms
   lanes simulate --partitions 16 --workers 2 --ack-wait 50ms --process-time 80ms          # duplicates
   lanes simulate --partitions 16 --workers 2 --ack-wait 50ms --process-time 80ms --in-progress
   lanes simulate -f lanes.yaml --keys file:keys.txt --sweep 1..64 --target-rate 5000 --target-p99 200ms --plot sweep.png
   lanes simulate --partitions 1 --keys-in-flight 32 --keys uniform:1000 --process-time 1ms          # key-parallel lanes
   lanes simulate --keys uniform:1000 --process-time 1ms --sweep 16,1024 --sweep-keys-in-flight 1,64 --target-rate 5000
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
	o := SimulateOptions{IO: io, CommandLine: typedCommand(c), PlotPath: c.String("plot"), Options: sim.Options{
		Keys: c.String("keys"), FromStream: c.String("from-stream"), Stdin: io.In, Messages: c.Int("messages"),
		Rate: c.Float64("rate"), WorkersPerLane: c.Int("workers"), Crash: c.Float64("crash"), InProgress: c.Bool("in-progress"),
		Seed: c.Uint64("seed"), Target: model.Target{Rate: c.Float64("target-rate"), P99: c.Duration("target-p99")},
		Live: c.Bool("live"), Keep: c.Bool("keep"), Conn: connectOptions(c), RunLive: runLive}}
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
	if o.SweepKeys, err = parseKeysInFlight(c.String("sweep-keys-in-flight")); err != nil {
		return o, err
	}
	if o.Failing, err = parseFailing(c.String("failing-key")); err != nil {
		return o, err
	}
	o.Server = model.DefaultServerCost.WithCores(c.Float64("server-cores"))
	if o.SweepFrom == 0 {
		for _, f := range []string{"sweep-keys-in-flight", "server-cores"} {
			if c.IsSet(f) {
				return o, usageErrorf("--%s belongs to a sweep: add --sweep A..B", f)
			}
		}
	}
	if o.Server.Cores < 0 || math.IsNaN(o.Server.Cores) || math.IsInf(o.Server.Cores, 0) {
		return o, usageErrorf("--server-cores %g: must be 0 (leave the server out) or a positive number of cores", o.Server.Cores)
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
		d = sim.SeedDesign(d)
		o.SeedStory = o.Keys == "" && o.FromStream == ""
	}
	if o.SweepFrom > 0 && d.Destination != "" {
		return o, usageErrorf("--sweep varies the partition count, but the design adopts a fixed destination %q", d.Destination)
	}
	if o.Plan, err = planWithWarnings(d, io); err != nil {
		return o, err
	}
	if err := o.checkSweepKeys(); err != nil {
		return o, err
	}
	if err := o.CheckSize(0); err != nil {
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

func (o *SimulateOptions) validate() error {
	switch {
	case o.Messages < 1:
		return usageErrorf("--messages %d: must be at least 1", o.Messages)
	case o.Rate < 0:
		return usageErrorf("--rate %g: must be 0 (all at once) or a positive rate per second", o.Rate)
	case o.WorkersPerLane < 1:
		return usageErrorf("--workers %d: must be at least 1 worker per lane", o.WorkersPerLane)
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

// parseSweep reads "A..B" (or a single count "N"), or a list of counts
// and ranges, "16,64,1024" or "1..8,16".
func (o *SimulateOptions) parseSweep(s string) error {
	if s == "" {
		return nil
	}
	const how = "a range of partition counts like 1..64, or a list like 16,64,1024"
	if !strings.Contains(s, ",") {
		a, b, err := parseRange("--sweep", s, how, planner.MaxPartitions, "partitions")
		o.SweepFrom, o.SweepTo = a, b
		return err
	}
	var counts []int
	for _, item := range strings.Split(s, ",") {
		a, b, err := parseRange("--sweep", strings.TrimSpace(item), how, planner.MaxPartitions, "partitions")
		if err != nil {
			return usageErrorf("--sweep %q: write %s, each count between 1 and %d", s, how, planner.MaxPartitions)
		}
		for p := a; p <= b; p++ {
			counts = append(counts, p)
		}
	}
	slices.Sort(counts)
	counts = slices.Compact(counts)
	o.SweepCounts, o.SweepFrom, o.SweepTo = counts, counts[0], counts[len(counts)-1]
	return nil
}

// parseRange reads "A..B" or "N" for flag, between 1 and most.
func parseRange(flag, s, how string, most int, what string) (int, int, error) {
	from, to, found := strings.Cut(s, "..")
	if !found {
		to = from
	}
	a, errA := strconv.Atoi(strings.TrimSpace(from))
	b, errB := strconv.Atoi(strings.TrimSpace(to))
	switch {
	case errA != nil || errB != nil:
		return 0, 0, usageErrorf("%s %q: write %s", flag, s, how)
	case a < 1 || b < a:
		return 0, 0, usageErrorf("%s %q: the range must start at 1 or more and not run backwards", flag, s)
	case b > most:
		return 0, 0, usageErrorf("%s %q: at most %d %s", flag, s, most, what)
	}
	return a, b, nil
}

// parseKeysInFlight reads the keys in flight a sweep tries: a list
// "1,8,64", or "A..B", which doubles from A and ends at B (1..64: 1, 2,
// 4, 8, 16, 32, 64).
func parseKeysInFlight(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	const flag, how = "--sweep-keys-in-flight", "a list like 1,8,64 or a range like 1..64 (doubling)"
	var ks []int
	for _, item := range strings.Split(s, ",") {
		a, b, err := parseRange(flag, strings.TrimSpace(item), how, planner.MaxKeysInFlight, "keys in flight (lane.keys_in_flight)")
		if err != nil {
			if !strings.Contains(s, ",") {
				return nil, err
			}
			return nil, usageErrorf("%s %q: write %s, each between 1 and %d", flag, s, how, planner.MaxKeysInFlight)
		}
		for k := a; k < b; k *= 2 {
			ks = append(ks, k)
		}
		ks = append(ks, b)
	}
	slices.Sort(ks)
	return slices.Compact(ks), nil
}

// parseFailing reads --failing-key KEY:N.
func parseFailing(s string) (workload.Failing, error) {
	if s == "" {
		return workload.Failing{}, nil
	}
	i := strings.LastIndex(s, ":")
	if i <= 0 {
		return workload.Failing{}, usageErrorf("--failing-key %q: write KEY:N, the key and how many attempts its first message fails", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 {
		return workload.Failing{}, usageErrorf("--failing-key %q: N, the attempts that fail, must be a whole number of 1 or more", s)
	}
	return workload.Failing{Key: s[:i], Attempts: n}, nil
}

// checkSweepKeys refuses keys in flight the design cannot take, as plan
// would refuse --keys-in-flight: each K above 1 is planned, and the
// error names the field in the way (a max_ack_pending of its own, an
// unpinned lane).
func (o SimulateOptions) checkSweepKeys() error {
	for _, k := range o.SweepKeys {
		if k <= 1 || k == o.Plan.Design.Lane.KeysInFlight {
			continue
		}
		d := o.Plan.Design
		d.Origin = maps.Clone(d.Origin)
		d.Lane.KeysInFlight = k
		d.SetOrigin("lane.keys_in_flight", "--sweep-keys-in-flight")
		if _, err := planner.New(d); err != nil {
			return usageErrorf("--sweep-keys-in-flight %d: %v", k, err)
		}
	}
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
			return sim.SeedStrategies, nil
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

// runSimulate runs the simulation (or the sweep) and shows it in the
// view chosen once with -o.
func runSimulate(ctx context.Context, o SimulateOptions) error {
	view := newSimulateView(o)
	if o.SweepFrom > 0 {
		r, err := sim.Sweep(ctx, o.Options)
		if err != nil {
			return err
		}
		if o.PlotPath != "" {
			if err := writePlot(o, r.Sweep); err != nil {
				return err
			}
		}
		return view.sweep(r)
	}
	meter := progress.New(o.IO.Err, o.IO.ErrTTY, "simulate") // shows a live run's progress
	o.Progress = func(name string, done, total int) { meter.Update("live "+name, int64(done), int64(total)) }
	o.Warn = func(msg string) { fmt.Fprintf(o.IO.Err, "warning: %s\n", msg) }
	r, err := sim.Run(ctx, o.Options)
	meter.Finish()
	if r == nil {
		return err
	}
	if len(r.Kept) > 0 {
		fmt.Fprintf(o.IO.Err, "kept on the server (--keep): streams %s; remove each with: nats stream rm NAME\n", strings.Join(r.Kept, ", "))
	}
	return errors.Join(err, view.simulation(r)) // a stopped live run still reports what it saw
}

// simulateView shows a simulation or a sweep in the format chosen once
// with -o: tables, or one JSON document.
type simulateView interface {
	simulation(r *sim.Report) error
	sweep(r *sim.SweepReport) error
}

func newSimulateView(o SimulateOptions) simulateView {
	if o.Output == "json" {
		return simulateDocView{out: o.IO.Out}
	}
	return simulateTableView{o: o}
}

type simulateTableView struct{ o SimulateOptions }

func (v simulateTableView) simulation(r *sim.Report) error {
	if err := render.SimulationTable(v.o.IO.Out, render.NewStyles(v.o.IO.Out), *r); err != nil {
		return err
	}
	if v.o.SeedStory && !v.o.Live {
		fmt.Fprintf(v.o.IO.Err, "\nnext: %s   (the same on a real nats-server: %s)\n", shellLine(append(v.o.CommandLine, "--live")), liveServerWords(v.o))
	}
	return nil
}

func (v simulateTableView) sweep(r *sim.SweepReport) error {
	return render.SweepReportTable(v.o.IO.Out, render.NewStyles(v.o.IO.Out), *r)
}

type simulateDocView struct{ out io.Writer }

func (v simulateDocView) simulation(r *sim.Report) error { return render.JSON(v.out, r) }

func (v simulateDocView) sweep(r *sim.SweepReport) error { return render.JSON(v.out, r) }

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

// liveServerWords says which server --live would use with these options.
func liveServerWords(o SimulateOptions) string {
	if o.Conn.Given() {
		return "the one the connection flags, NATS_URL or the natscli context name"
	}
	return "an embedded one, no setup"
}
