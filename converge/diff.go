// Package converge is the live-server side of lanes apply: it reads the
// stream and its lanes, compares them with a plan (Compare, giving a Diff),
// and carries the diff out with many requests in flight (Execute),
// including the two changes that need a procedure: recreating a lane at
// its position, and repartitioning without breaking per-key order.
//
// Every step derives from live state, so an apply interrupted anywhere is
// finished by the next one. converge prints nothing and asks nothing:
// callers get a Diff to show, a Progress callback, and typed errors.
package converge

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// Options change what apply is allowed to do.
type Options struct {
	// Recreate allows recreating a lane whose change the server forbids
	// (immutable fields), at its current position.
	Recreate bool
	// Prune deletes lanes of this design that the design no longer has,
	// when they are drained (or always, with Force).
	Prune bool
	// Force prunes lanes that still have messages, and allows changes that
	// move stored messages away from a lane (a filter or mapping change in
	// place).
	Force bool
	// MappingSwitched says the operator has installed the new account
	// mapping on every server (mapping: account). A client cannot check it.
	MappingSwitched bool
	// DrainTimeout bounds the wait for old lanes to drain in a repartition;
	// 0 checks once and does not wait.
	DrainTimeout time.Duration
	// DrainPoll is how often the drain is checked (default 250ms).
	DrainPoll time.Duration
	// Concurrency is how many requests are in flight at once (default 32).
	Concurrency int
	// MissingLaneStart is where a lane missing from a generation that runs
	// (deleted by hand) restarts: RestartRecorded, RestartAtStart or
	// RestartNow. Empty: apply refuses when the lane's partition holds
	// messages it could deliver again.
	MissingLaneStart string
	// LaneRecords reads what lanes work recorded about a design's lanes
	// (lane name -> record); nil: its membership bucket (membership
	// package). Compare calls it only when a lane is missing from a
	// generation that runs; an error is reported in the diff, not
	// returned.
	LaneRecords func(ctx context.Context, stream, design string) (map[string]LaneRecord, error)
	// Progress, when set, is told how far each phase is.
	Progress func(Progress)
}

// DefaultConcurrency is the requests in flight: beyond it a single
// connection gains little (see docs/apply.md).
const DefaultConcurrency = 32

// Progress is how far one phase of Execute is.
type Progress struct {
	Phase Phase
	Done  int64
	Total int64
}

// Phase names a step of Execute.
type Phase string

const (
	PhaseLanes  Phase = "lanes"  // creating, updating, recreating lanes
	PhaseDrain  Phase = "drain"  // waiting for old lanes' backlog to reach zero
	PhaseResume Phase = "resume" // resuming the new lanes of a repartition
	PhaseDelete Phase = "delete" // deleting drained old lanes, pruning
)

// Action is what apply does to one object.
type Action string

const (
	ActionCreate      Action = "create"      // does not exist
	ActionUpdate      Action = "update"      // exists, mutable fields differ
	ActionUnchanged   Action = "unchanged"   // exists as designed
	ActionRecreate    Action = "recreate"    // immutable fields differ; --recreate: delete and create at its position
	ActionFinish      Action = "finish"      // an interrupted recreate: create at the recorded position
	ActionRefused     Action = "refused"     // needs an explicit flag; nothing is done
	ActionHold        Action = "hold"        // repartition: pause a new lane until the old ones drain
	ActionResume      Action = "resume"      // a held lane whose hold is over
	ActionDrain       Action = "drain"       // repartition: old lane, deleted once drained
	ActionDelete      Action = "delete"      // --prune: not in the design, deleted
	ActionKeep        Action = "keep"        // not in the design, left alone
	ActionUnavailable Action = "unavailable" // its leader did not answer: not checked, not changed
)

// Diff is the difference between a plan and a live server, and what apply
// will do about it. It is a value: render it (its JSON is for reading),
// then Execute it in the same run. It cannot be saved and executed later:
// it holds the plan and the live state it was computed from, which its
// JSON leaves out, and a later run must compare again anyway.
type Diff struct {
	Design  string        `json:"design"`
	Stream  StreamChange  `json:"stream"`
	Lanes   []LaneChange  `json:"lanes"`
	Account *AccountNotes `json:"account_mapping,omitempty"`
	// Repartition is set while the partition count is changing.
	Repartition *Repartition `json:"repartition,omitempty"`
	// Refusals say why apply will not proceed without a flag; apply changes
	// nothing when there is one.
	Refusals []string `json:"refusals,omitempty"`
	// OutOfReach is what differs but apply does not change, and why.
	OutOfReach []string `json:"out_of_reach,omitempty"`
	// OtherConsumers counts consumers on the stream that are not lanes of
	// this design: apply never touches them.
	OtherConsumers int `json:"other_consumers"`
	// ReadRequests is how many API requests reading the live state took.
	ReadRequests int `json:"read_requests"`

	plan *planner.Plan
	live *Live
	opts Options
}

// StreamChange is what happens to the stream.
type StreamChange struct {
	Name    string        `json:"name"`
	Action  Action        `json:"action"` // create, update or unchanged
	Changes []FieldChange `json:"changes,omitempty"`
	// SwitchMapping is the subject transform change that a repartition
	// makes only once every new lane exists and is held.
	SwitchMapping *FieldChange `json:"switch_mapping,omitempty"`

	edit *streamEdit // the changes, before any mapping switch
}

// FieldChange is one field, old -> new, in the JetStream API's JSON form.
// Old is null when the field is absent; New is null when it is removed.
type FieldChange struct {
	Field     string          `json:"field"`
	Old       json.RawMessage `json:"old"`
	New       json.RawMessage `json:"new"`
	Immutable bool            `json:"immutable,omitempty"` // the server refuses to update it
}

// LaneChange is what happens to one lane (or one consumer tagged as a lane).
type LaneChange struct {
	Name       string        `json:"name"`
	Partition  int           `json:"partition"`
	Partitions int           `json:"partitions"` // the lane's generation
	Action     Action        `json:"action"`
	Changes    []FieldChange `json:"changes,omitempty"`
	// KeysInFlight is set when the change makes the lane's keys in flight
	// (lane.keys_in_flight) another number: part of an ordinary update.
	KeysInFlight *KeysInFlightChange `json:"keys_in_flight,omitempty"`
	// Held: created or kept paused until a repartition's old lanes drain.
	Held bool `json:"held,omitempty"`
	// Backlog is num_pending + num_ack_pending when it was read.
	Backlog int64 `json:"backlog"`
	// Reason explains a refused, kept, unavailable or recreated lane.
	Reason string `json:"reason,omitempty"`
	// Position is where a recreated or finished lane starts: the stream
	// sequence after its ack floor.
	Position *Position `json:"position,omitempty"`
	// StartSeq is where a created lane starts: after the messages of its
	// generation that earlier lanes processed (0: at the beginning).
	StartSeq uint64 `json:"start_seq,omitempty"`
	// Missing is set for a lane missing from a generation that runs
	// (deleted by hand): what its partition holds, where it restarts.
	Missing *MissingLane `json:"missing,omitempty"`

	want        planner.ConsumerConfig
	live        *jetstream.ConsumerInfo
	placeholder *jetstream.ConsumerInfo // an interrupted recreate's record
}

// Position is a lane's place in the stream, for recreating it.
type Position struct {
	StartSeq uint64 `json:"start_seq"` // first stream sequence the new lane delivers (after the ack floor)
	// InFlight is how many messages were delivered and not acked.
	InFlight int `json:"in_flight"`
	// Redelivered are the stream sequences of the lane's messages that were
	// delivered after its ack floor, looked up on its filter when the lane
	// was recreated: the new lane delivers them again (in flight, or acked
	// out of order when max ack pending is above 1). Null when unknown: a
	// recreate finished from its record.
	Redelivered []uint64 `json:"redelivered"`
	// RedeliveredMore: more were delivered than looked up (Redelivered
	// holds the first ones).
	RedeliveredMore bool `json:"redelivered_more,omitempty"`
}

// Repartition describes a partition count change in progress.
type Repartition struct {
	From     []int    `json:"from"` // old generations (partition counts), usually one
	To       int      `json:"to"`
	Mapping  string   `json:"mapping"`          // stream or account
	Switched bool     `json:"mapping_switched"` // publishes already go to the new lanes
	Step     string   `json:"step"`             // the next step, in words
	OldLanes []string `json:"old_lanes"`
	Backlog  int64    `json:"backlog"` // old lanes' num_pending + num_ack_pending
}

// AccountNotes is what the operator must do when the mapping lives in the
// account: apply cannot install it or check it.
type AccountNotes struct {
	Source      string   `json:"source"`
	Destination string   `json:"destination"`
	Unverified  []string `json:"unverified"`
}

// Pending reports whether executing the diff would change anything.
func (d *Diff) Pending() bool {
	if d.Stream.Action != ActionUnchanged || d.Stream.SwitchMapping != nil || d.Repartition != nil {
		return true
	}
	for _, l := range d.Lanes {
		switch l.Action {
		case ActionKeep, ActionUnavailable, ActionRefused:
		case ActionUnchanged:
			if l.placeholder != nil {
				return true // a leftover recreate record to delete
			}
		default:
			return true
		}
	}
	return false
}

// Refused reports whether apply will refuse to run this diff.
func (d *Diff) Refused() bool { return len(d.Refusals) > 0 }

// Unavailable lists the lanes whose state could not be read.
func (d *Diff) Unavailable() []string {
	var out []string
	for _, l := range d.Lanes {
		if l.Action == ActionUnavailable {
			out = append(out, l.Name)
		}
	}
	return out
}

// StreamExists reports whether the stream was there before apply.
func (d *Diff) StreamExists() bool { return d.live.Stream != nil }

// Counts is how many lanes get each action.
func (d *Diff) Counts() map[Action]int {
	out := map[Action]int{}
	for _, l := range d.Lanes {
		out[l.Action]++
	}
	return out
}

// Plan is the plan this diff was computed for.
func (d *Diff) Plan() *planner.Plan { return d.plan }
