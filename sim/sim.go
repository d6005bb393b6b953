// Package sim is lanes simulate: from a design and a workload's settings
// to a Report (every strategy through the model and, with Live, on a
// server, each figure beside the model's) or a SweepReport (the lanes
// strategy over a range of partition counts, and the count to take). It
// reads the keys (generated, from a keys file or from a stream's subject
// counts), makes the workload, and runs the packages below it: the
// strategies (sim/strategy), the model (sim/model), the live run
// (sim/live), judged by sim/judge.
package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// The seed story: what lanes simulate runs with no design and no keys.
var (
	SeedKeys       = []string{"alice", "bob", "carol"}
	SeedStrategies = []strategy.Strategy{strategy.Single, strategy.Lanes}
)

// SeedDesign fills in the seed story's design where none is given:
// updates for users on msgs.received_from.<user>, the user is the key, 8
// lanes (the planner's default). Settings already in d still apply.
func SeedDesign(d planner.Design) planner.Design {
	d.Subject = "msgs.received_from.*"
	if d.Name == "" && d.Stream.Name == "" {
		d.Name = "orders"
	}
	return d
}

// defaultKeys are the keys when none are given (outside the seed story).
const defaultKeys = "uniform:100"

// Options is one simulation. The caller checks each setting (lanes
// simulate's flags); Run and Sweep check what depends on the keys.
type Options struct {
	Plan       *planner.Plan
	Strategies []strategy.Strategy
	// SeedStory: the seed's keys, SeedKeys, unless keys are given.
	SeedStory bool
	// Keys is uniform:K, zipf:K:S or file:PATH (file:- reads Stdin);
	// empty means uniform:100, or the seed's keys, unless FromStream is
	// set: the per-subject message counts of that stream on Conn's server.
	Keys       string
	FromStream string
	Stdin      io.Reader
	Messages   int
	Rate       float64 // per second, 0 = all at once
	Process    workload.Process
	// WorkersPerLane: every strategy gets the most partitions tried times
	// this many workers.
	WorkersPerLane int
	Crash          float64
	// Failing makes one key's first message fail its first attempts.
	Failing    workload.Failing
	InProgress bool
	Seed       uint64
	// SweepFrom..SweepTo are the partition counts Sweep tries, against
	// Target; SweepCounts, when set, lists them instead (SweepFrom and
	// SweepTo are then its first and last).
	SweepFrom, SweepTo int
	SweepCounts        []int
	// SweepKeys are the keys in flight Sweep tries with every count;
	// empty: the design's.
	SweepKeys []int
	// Server is the sweep's server term (model.ServerCost).
	Server model.ServerCost
	Target model.Target
	// Live runs the workload on Conn's server too (an embedded one when
	// Conn names none); Keep leaves what it created on a named server.
	Live bool
	Keep bool
	Conn connect.Options
	// Lease and RoundTrip are the kv-lease strategy's settings (RoundTrip
	// for the model only: the live run has real ones).
	Lease     strategy.LeaseSettings
	RoundTrip time.Duration

	// Progress, when set, is told the live run's progress (see
	// live.Options.Progress).
	Progress func(strategy string, done, total int)
	// Warn, when set, is told what went wrong without stopping the run.
	Warn func(msg string)
	// RunLive runs the live simulation: live.Run when nil.
	RunLive func(context.Context, live.Options) ([]judge.Result, error)
}

// InputError is an input the simulation cannot take: keys that do not fit
// the design, a keys file or stream without keys, a workload too large to
// hold. Nothing ran.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErrorf(format string, args ...any) error {
	return &InputError{fmt.Errorf(format, args...)}
}

// CheckSize refuses a simulation too large to hold, before any of it is
// allocated; keys is 0 while the keys are not read yet.
func (o Options) CheckSize(keys int) error {
	if o.WorkersPerLane > planner.MaxSimWorkers {
		return inputErrorf("--workers %d: a simulation runs at most %d workers in all", o.WorkersPerLane, planner.MaxSimWorkers)
	}
	if err := workload.CheckSize(o.Messages, keys, o.workers()); err != nil {
		return &InputError{err}
	}
	return nil
}

// workers is every strategy's worker count: the most partitions tried
// times the workers per lane.
func (o Options) workers() int {
	return max(o.Plan.Design.Partitions, o.SweepTo) * o.WorkersPerLane
}

// Run runs the model once per strategy on one workload and, with Live,
// the same workload on a server, with the model's prediction beside each
// live result. A live run that stops part way (an error, a cancellation)
// returns what it measured together with its error.
func Run(ctx context.Context, o Options) (*Report, error) {
	_, w, info, err := o.prepare(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Mode: "model", Design: o.Plan.Design.Name, Subject: o.Plan.Design.Subject,
		Partitions: o.Plan.Design.Partitions, WorkersPerLane: o.WorkersPerLane, Workload: info, LaneNames: laneNames(o.Plan)}
	if k := o.Plan.Design.Lane.KeysInFlight; k > 1 {
		r.KeysInFlight = k
	}
	predictions, err := o.model(ctx, w)
	if err != nil {
		return nil, err
	}
	if !o.Live {
		for _, p := range predictions {
			r.Results = append(r.Results, StrategyResult{Result: p})
		}
		r.judge()
		return r, nil
	}
	r.Mode = "live"
	err = o.live(ctx, w, predictions, r)
	if err != nil && len(r.Results) == 0 {
		return nil, err
	}
	r.judge()
	return r, err
}

// judge gives every result its verdict: on the live figures in a live run.
func (r *Report) judge() {
	results := make([]judge.Result, len(r.Results))
	for i, res := range r.Results {
		results[i] = res.Result
	}
	r.Verdicts = strategy.Verdicts(results)
}

// Sweep runs the lanes strategy over the partition range, each count
// planned afresh (keys move between partitions as the count changes),
// and recommends one (model.RunSweep).
func Sweep(ctx context.Context, o Options) (*SweepReport, error) {
	spec, _, info, err := o.prepare(ctx)
	if err != nil {
		return nil, err
	}
	sc := model.SweepConfig{
		From: o.SweepFrom, To: o.SweepTo, Counts: o.SweepCounts, KeysInFlight: o.SweepKeys, Server: o.Server,
		Target: o.Target, Headroom: model.DefaultHeadroom,
		Base: o.modelConfig(strategy.Lanes, nil), LaneFor: o.laneFor,
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
		return nil, err
	}
	return &SweepReport{Design: o.Plan.Design.Name, Subject: o.Plan.Design.Subject,
		WorkersPerLane: o.WorkersPerLane, Workload: info, Sweep: sw}, nil
}

// laneFor is the design's lane with k keys in flight, as the planner
// would make it: above 1 pinned with max ack pending k; 1 a serial lane,
// pinned only when the design asks for it (not when the planner pinned
// it for the design's keys in flight).
func (o Options) laneFor(k int) model.Lane {
	l := o.modelConfig(strategy.Lanes, nil).Lane.WithKeysInFlight(k)
	d := o.Plan.Design
	if _, set := d.Origin["lane.pinned"]; k <= 1 && d.Lane.KeysInFlight > 1 && !set {
		l.Pinned = false
	}
	return l
}

// prepare reads the keys and makes the workload.
func (o Options) prepare(ctx context.Context) (workload.Spec, *workload.Workload, WorkloadInfo, error) {
	keys, from, err := o.keys(ctx)
	if err != nil {
		return workload.Spec{}, nil, WorkloadInfo{}, err
	}
	if err := o.CheckSize(len(keys.Names)); err != nil {
		return workload.Spec{}, nil, WorkloadInfo{}, err
	}
	spec := workload.Spec{Keys: keys, Messages: o.Messages, Rate: o.Rate, Process: o.Process, Crash: o.Crash, Failing: o.Failing, Seed: o.Seed}
	w, err := workload.Generate(spec)
	if err != nil {
		return workload.Spec{}, nil, WorkloadInfo{}, &InputError{err}
	}
	return spec, w, o.workloadInfo(w, from), nil
}

// model runs the model once per strategy on the same workload.
func (o Options) model(ctx context.Context, w *workload.Workload) ([]judge.Result, error) {
	parts, err := keyPartitions(o.Plan, w.Spec.Keys)
	if err != nil {
		return nil, err
	}
	var out []judge.Result
	for _, s := range o.Strategies {
		r, err := model.Run(ctx, w, o.modelConfig(s, parts))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (o Options) modelConfig(st strategy.Strategy, keyPartition []int) model.Config {
	l := o.Plan.Design.Lane
	lane := model.Lane{AckWait: l.AckWait.D(), MaxDeliver: l.MaxDeliver, MaxAckPending: l.MaxAckPending,
		Pinned: l.Pinned, PinnedTTL: l.PinnedTTL.D(), KeysInFlight: l.KeysInFlight}
	for _, b := range l.BackOff {
		lane.BackOff = append(lane.BackOff, b.D())
	}
	return model.Config{Strategy: st, Partitions: o.Plan.Design.Partitions, WorkersPerLane: o.WorkersPerLane,
		KeyPartition: keyPartition, Lane: lane, InProgress: o.InProgress, Lease: o.Lease, RoundTrip: o.RoundTrip}
}

// keyPartitions places every workload key with the planner's hash, the
// server's partition function.
func keyPartitions(p *planner.Plan, keys workload.Keys) ([]int, error) {
	out := make([]int, len(keys.Subjects))
	for i, s := range keys.Subjects {
		part, ok := p.Layout.PartitionOf([]byte(s))
		if !ok {
			return nil, inputErrorf("key subject %q does not match the design's subject %s", s, p.Design.Subject)
		}
		out[i] = part
	}
	return out, nil
}

func laneNames(p *planner.Plan) []string {
	out := make([]string, len(p.Lanes))
	for i, l := range p.Lanes {
		out[i] = l.Name
	}
	return out
}

func (o Options) workloadInfo(w *workload.Workload, from string) WorkloadInfo {
	l := o.Plan.Design.Lane
	info := WorkloadInfo{Messages: len(w.Messages), Keys: len(w.Spec.Keys.Names), KeysFrom: from,
		Rate: o.Rate, ProcessTime: o.Process.String(), AckWait: l.AckWait.String(), MaxDeliver: l.MaxDeliver,
		InProgress: o.InProgress, Crash: o.Crash, Seed: o.Seed, FailingKey: o.Failing.Key, FailingAttempts: o.Failing.Attempts}
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
