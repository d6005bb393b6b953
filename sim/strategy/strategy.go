// Package strategy defines, once each, the ways lanes simulate consumes a
// workload: a strategy's name and one-line summary, how its consumers are
// shaped, how its workers take messages (the model's mechanics and the
// live run's are two implementations named here), how its side effects are
// checked, and what the verdict says about it. The model (sim/model), the
// live run (sim/live), the simulate command and the renderer all read the
// same value, so a new strategy is one entry in All, plus its mechanics
// where it needs new ones.
package strategy

import (
	"fmt"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/sim/figure"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/workload"
)

// Consumers is how a strategy spreads messages over consumers.
type Consumers int

const (
	// Shared: one consumer over every message, all the workers on it.
	Shared Consumers = iota
	// PerPartition: one lane per partition of the design, the workers of
	// each lane on it; a key's messages all go to its partition's lane.
	PerPartition
)

// AckPending is a strategy's max ack pending per consumer.
type AckPending int

const (
	// OneAtATime: max ack pending 1.
	OneAtATime AckPending = iota
	// EveryWorker: as many as the consumer has workers.
	EveryWorker
	// AsDesigned: the design's lane setting.
	AsDesigned
)

// Mechanics is how a worker takes a message. The model and the live run
// each implement the mechanics their strategies name.
type Mechanics string

const (
	// Pull: pull one message, work, apply the side effect, then ack.
	Pull Mechanics = "pull"
	// Work: the lanes work runtime (package work): one confirmed ack
	// before the next message, in-progress acks, pinned hand-over. Live only.
	Work Mechanics = "work"
	// Lease: pull one message, take its key's lease (a conditional create
	// in a KV bucket with a per-key TTL), work, write with the lease's
	// revision as the fencing token, release (a delete conditional on that
	// revision), then ack. A message whose key another worker holds is
	// naked with the lease retry delay, for a later try.
	Lease Mechanics = "lease"
)

// LeaseSettings are the lease mechanics' settings.
type LeaseSettings struct {
	// TTL is the lease key's time to live (the server's per-key TTLs are
	// whole seconds, 1s or more). With in-progress acks the holder renews
	// it every TTL/3 while it works; without, a job longer than the TTL
	// loses its lease mid-job, and the key's next message can start beside it.
	TTL time.Duration
	// Retry is the nak delay of a message whose key is leased.
	Retry time.Duration
}

// Default lease settings.
const (
	DefaultLeaseTTL = 30 * time.Second // as the design's default ack wait
)

// DefaultLeaseRetry is the nak delay of a message whose key is leased,
// when none is given: half the mean processing time (a holder is then
// halfway through on average), at least 10ms: nats-server looks at
// delayed naks 10ms after the nak at the soonest.
func DefaultLeaseRetry(meanProcess time.Duration) time.Duration {
	return max(meanProcess/2, 10*time.Millisecond)
}

// Strategy is one way of consuming the workload.
type Strategy struct {
	Name string
	// Summary is one line for --help and the docs.
	Summary    string
	Consumers  Consumers
	AckPending AckPending
	// Pinned: lanes follow the design's pinned-client setting.
	Pinned bool
	// KeyParallel: lanes follow the design's keys in flight; with K above
	// 1 a lane's owner runs up to K distinct keys at once, one message per
	// key (a key-parallel lane).
	KeyParallel bool
	// Store is how the store the workers write to checks a write.
	Store judge.Store
	// Model and Live are the mechanics of the model's and the live run's
	// workers.
	Model, Live Mechanics
	// Default strategies run when --strategy is not given.
	Default bool
	// Baseline: the verdict (Verdicts) compares the others with it.
	Baseline bool
	// Notes are what the verdict says about a result beyond throughput,
	// order, duplicates and final state; nil for nothing.
	Notes func(judge.Result) []string
}

// Params are what a strategy's shape depends on: the design and the
// workers per lane. Every strategy gets Partitions x WorkersPerLane workers.
type Params struct {
	Partitions     int
	WorkersPerLane int
	MaxAckPending  int  // the design's lanes'
	Pinned         bool // the design's lanes are pinned
	// KeysInFlight is the design's lane.keys_in_flight (0 or 1: serial lanes).
	KeysInFlight int
}

// Workers is every strategy's total.
func (p Params) Workers() int { return p.Partitions * p.WorkersPerLane }

// Shape is how a strategy organises the workers into consumers, for one
// design. The model and the live run build the same shape.
type Shape struct {
	Consumers     int  // one shared consumer, or one lane per partition
	WorkersEach   int  // workers pulling from each consumer
	MaxAckPending int  // per consumer
	Pinned        bool // only the pinned worker of a consumer receives
	// ByPartition: a message goes to the consumer of its key's partition;
	// otherwise every message goes to consumer 0.
	ByPartition bool
	// KeysInFlight above 1: each consumer is a key-parallel lane. Its max
	// ack pending is KeysInFlight, only its pinned owner receives, and the
	// owner runs a message only when no earlier message of its key is
	// unsettled; the others wait in their key's queue, holding their slot.
	KeysInFlight int
}

// KeyParallel reports whether the consumers are key-parallel lanes.
func (sh Shape) KeyParallel() bool { return sh.KeysInFlight > 1 }

// Shape is the strategy's consumer layout for p.
func (s Strategy) Shape(p Params) Shape {
	sh := Shape{Consumers: 1, WorkersEach: p.Workers()}
	if s.Consumers == PerPartition {
		sh = Shape{Consumers: p.Partitions, WorkersEach: p.WorkersPerLane, ByPartition: true}
	}
	switch s.AckPending {
	case OneAtATime:
		sh.MaxAckPending = 1
	case EveryWorker:
		sh.MaxAckPending = sh.WorkersEach
	case AsDesigned:
		sh.MaxAckPending = p.MaxAckPending
	}
	sh.Pinned = s.Pinned && p.Pinned
	if s.KeyParallel && sh.ByPartition && p.KeysInFlight > 1 {
		// The planner makes such a lane pinned with max ack pending K.
		sh.KeysInFlight, sh.MaxAckPending, sh.Pinned = p.KeysInFlight, p.KeysInFlight, true
	}
	return sh
}

// Recorder makes the judge a run of the strategy reports to: its lanes are
// the shape's consumers. keyPartition gives each workload key's partition
// (needed by strategies with a lane per partition).
func (s Strategy) Recorder(w *workload.Workload, p Params, keyPartition []int) *judge.Recorder {
	sh := s.Shape(p)
	laneOf := func(int) int { return 0 }
	if sh.ByPartition {
		laneOf = func(i int) int { return keyPartition[w.Messages[i].Key] }
	}
	rec := judge.New(w, s.Name, sh.Consumers, sh.WorkersEach, laneOf, s.Store)
	if sh.KeyParallel() {
		rec.KeyParallel(sh.KeysInFlight)
	}
	return rec
}

// Single is the seed's starting point: one serial consumer.
var Single = Strategy{
	Name:       "single",
	Summary:    "one shared consumer, MaxAckPending=1 (serial: order, no speed)",
	Consumers:  Shared,
	AckPending: OneAtATime,
	Model:      Pull,
	Live:       Pull,
	Default:    true,
	Baseline:   true,
}

// Lanes is the design: one serial lane per partition, or with keys in
// flight K above 1, one key-parallel lane per partition.
var Lanes = Strategy{
	Name:        "lanes",
	Summary:     "the design: one serial lane per partition",
	Consumers:   PerPartition,
	AckPending:  AsDesigned,
	Pinned:      true,
	KeyParallel: true,
	Model:       Pull,
	Live:        Work,
	Default:     true,
	Notes:       lanesNotes,
}

// Unordered shows what goes wrong without serial consumers.
var Unordered = Strategy{
	Name:       "unordered",
	Summary:    "one shared consumer, MaxAckPending = all workers (fast, unordered)",
	Consumers:  Shared,
	AckPending: EveryWorker,
	Model:      Pull,
	Live:       Pull,
	Default:    true,
}

// Versioned is unordered delivery into a version-checked store.
var Versioned = Strategy{
	Name:       "versioned",
	Summary:    "unordered into a version-checked store (final state right)",
	Consumers:  Shared,
	AckPending: EveryWorker,
	Store:      judge.Versioned,
	Model:      Pull,
	Live:       Pull,
	Default:    true,
}

// KVLease is the seed's lock/lease alternative to lanes: any worker takes
// any message, and a per-key lease keeps two workers off one key.
var KVLease = Strategy{
	Name:       "kv-lease",
	Summary:    "one shared consumer; a per-key lease in a KV bucket, fenced store",
	Consumers:  Shared,
	AckPending: EveryWorker,
	Store:      judge.Fenced,
	Model:      Lease,
	Live:       Lease,
	Notes:      leaseNotes,
}

// All is the registry, in display order.
var All = []Strategy{Single, Lanes, Unordered, Versioned, KVLease}

// Lookup finds a strategy by name (case-insensitive).
func Lookup(name string) (Strategy, bool) {
	for _, s := range All {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
	}
	return Strategy{}, false
}

// MustLookup is Lookup for names known to be registered.
func MustLookup(name string) Strategy {
	s, ok := Lookup(name)
	if !ok {
		panic(fmt.Sprintf("strategy %q is not registered", name))
	}
	return s
}

// Names lists every strategy's name, in display order.
func Names() []string {
	out := make([]string, len(All))
	for i, s := range All {
		out[i] = s.Name
	}
	return out
}

// Defaults are the strategies run when none is asked for.
func Defaults() []Strategy {
	var out []Strategy
	for _, s := range All {
		if s.Default {
			out = append(out, s)
		}
	}
	return out
}

// NamesOf lists the names of strategies.
func NamesOf(ss []Strategy) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func leaseNotes(r judge.Result) []string {
	var out []string
	if r.LeaseRetries > 0 {
		out = append(out, fmt.Sprintf("%d %s found the key leased and retried later", r.LeaseRetries, figure.Plural(r.LeaseRetries, "delivery", "deliveries")))
	}
	if r.LeasesLost > 0 {
		out = append(out, fmt.Sprintf("%d %s ran out mid-job (work longer than the lease TTL)", r.LeasesLost, figure.Plural(r.LeasesLost, "lease", "leases")))
	}
	return out
}

func lanesNotes(r judge.Result) []string {
	used := 0
	for _, l := range r.Lanes {
		if l.Messages > 0 {
			used++
		}
	}
	if used < len(r.Lanes) {
		return []string{fmt.Sprintf("only %d of %d lanes carry keys (a key never spreads over lanes)", used, len(r.Lanes))}
	}
	return nil
}
