// Package health reads the lanes of a stream and judges them, in two
// steps. Read does the I/O: one stream info, one paged CONSUMER.LIST pass,
// a bounded number of message lookups and lanes work's membership bucket
// become a Snapshot, the server's answers as they came. Judge is pure: a Snapshot becomes a Report, with
// per-lane figures, a summary, and Findings (a fault, its severity and one
// line of advice). Inspect is the two together. health formats nothing and
// knows nothing of flags: inspect renders a Report, simulate --live reads
// one, and Watch refreshes one until its context ends.
package health

import (
	"fmt"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// Severity orders findings: Critical means order or progress is broken now,
// Warning that it will break or is at risk, Info that it is worth knowing.
type Severity int

const (
	Info Severity = iota
	Warning
	Critical
)

var severityNames = []string{"info", "warning", "critical"}

func (s Severity) String() string {
	if s < Info || s > Critical {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText writes the severity by name, for JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ParseSeverity reads "info", "warning" or "critical".
func ParseSeverity(s string) (Severity, error) {
	for i, n := range severityNames {
		if strings.EqualFold(s, n) {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("unknown severity %q: use info, warning or critical", s)
}

// Finding is one fault: what is wrong, where, and what to do about it.
type Finding struct {
	Severity Severity
	Code     string // stable identifier, e.g. "stuck", "gap"
	Lane     string // the lane concerned; empty for stream-wide findings
	Message  string
	Advice   string
}

// State says whether the server answered for a lane.
type State string

const (
	StateOK      State = "ok"
	StateMissing State = "missing" // its leader did not answer in time
	StateOffline State = "offline" // the server reports it offline
)

// Lane is one lane's figures, as the server reported them at At.
type Lane struct {
	Name       string
	Design     string // from the lane's metadata; empty for lanes lanes did not create
	Partition  int
	Partitions int
	Filter     string
	Tagged     bool // created by lanes (found by metadata), not inferred from its filter
	// KeysInFlight is what the lane's lanes tag says: 1 for a serial lane,
	// K for a key-parallel one (lane.keys_in_flight); 0 for a lane lanes
	// did not create.
	KeysInFlight int
	State        State
	Reason       string // why the server reports it offline

	Pending       uint64 // matching messages not yet delivered
	AckPending    int    // delivered, not yet acknowledged
	MaxAckPending int
	Redelivered   int // messages redelivered and not yet acknowledged (not cumulative)
	Waiting       int // queued pull requests
	Backlog       uint64

	DeliveredSeq      uint64 // stream sequence of the last delivery
	AckFloorSeq       uint64 // every message up to here is acknowledged
	DeliveredConsumer uint64 // consumer sequences: every (re)delivery counts
	AckFloorConsumer  uint64
	LastDelivery      time.Time // zero: never
	LastAck           time.Time // zero: never
	At                time.Time // server time of these figures

	// HeadDeliveries is how often the head message was delivered; known
	// only for lanes with max ack pending 1 and a message out (0 otherwise).
	HeadDeliveries int
	Head           *Head // the oldest unacknowledged message, when looked up

	AckPolicy         string
	AckWait           time.Duration
	MaxDeliver        int
	Durable           bool
	InactiveThreshold time.Duration
	PinnedTTL         time.Duration // zero unless the lane pins a worker
	PinnedClient      string
	PinnedSince       time.Time
	Paused            bool
	PauseRemaining    time.Duration
	// PausedBy is who paused the lane with lanes pause, when and why,
	// while it is paused (nil: not paused, or paused by other means).
	PausedBy *membership.Pause
	Held     string // lanes.held metadata, e.g. "repartition"
	Leader   string // cluster leader of the lane
	// Server is the lanes work instance serving the lane, as its
	// membership bucket says; nil when no instance ever recorded it (or
	// the bucket could not be read: Report.WorkersUnknown).
	Server *Server

	// Rates per second between two reports (watch mode); see Rates.
	DeliveredRate float64
	AckedRate     float64
}

// Head is a lane's oldest unacknowledged message: the one the lane waits on.
type Head struct {
	Seq     uint64
	Subject string
	Key     string
	Time    time.Time // when it was stored
}

// Age is how old the lane's head message is: its lag as time.
func (l Lane) Age() (time.Duration, bool) {
	if l.Head == nil || l.Head.Time.IsZero() {
		return 0, false
	}
	return nonNegative(l.At.Sub(l.Head.Time)), true
}

// SinceDelivery is the time since the lane last delivered a message.
func (l Lane) SinceDelivery() (time.Duration, bool) { return since(l.At, l.LastDelivery) }

// SinceAck is the time since the lane's ack floor last moved.
func (l Lane) SinceAck() (time.Duration, bool) { return since(l.At, l.LastAck) }

// AtCap reports whether the lane has as many messages out as it may.
func (l Lane) AtCap() bool { return l.MaxAckPending > 0 && l.AckPending >= l.MaxAckPending }

// KeyParallel reports whether the lane's tag says it runs several keys at
// once (keys in flight above 1): lanes work gates it per key, so its max
// ack pending above 1 keeps per-key order.
func (l Lane) KeyParallel() bool { return l.KeysInFlight > 1 }

// Window is a key-parallel lane's window as the lanes work instance that
// serves it last recorded it; nil for a serial lane, for a lane no live
// instance serves (gone, handing over: the record is the old owner's),
// and for a record written before that instance took the lane.
func (l Lane) Window() *membership.Window {
	srv := l.Server
	if !l.KeyParallel() || srv == nil || srv.Gone || srv.Window == nil || srv.Window.At.Before(srv.Since) {
		return nil
	}
	return srv.Window
}

// OldestWaiting is the message of the lane's window that has waited
// longest for its key's earlier message, and for how long (at the
// lane's server time); false when none waits.
func (l Lane) OldestWaiting() (membership.Waiting, time.Duration, bool) {
	w := l.Window()
	if w == nil || w.Oldest == nil {
		return membership.Waiting{}, 0, false
	}
	return *w.Oldest, nonNegative(l.At.Sub(w.Oldest.Since)), true
}

// Generation is the partitioning the lane belongs to, e.g. "n8".
func (l Lane) Generation() string { return planner.Generation(l.Partitions) }

// AckAge is how long the lane has had a message out without a new
// delivery: with max ack pending 1, how long the head has been out.
func (l Lane) AckAge() (time.Duration, bool) {
	if l.AckPending == 0 {
		return 0, false
	}
	return l.SinceDelivery()
}

func since(at, t time.Time) (time.Duration, bool) {
	if t.IsZero() || at.IsZero() {
		return 0, false
	}
	return nonNegative(at.Sub(t)), true
}

func nonNegative(d time.Duration) time.Duration { return max(d, 0) }

// Layout is a partition mapping the report knows of, and where it was found.
type Layout struct {
	Source      string
	Destination string
	Partitions  int
	Origin      string // "design" (the design file), "stream" (its subject transform) or "lanes" (lane metadata)
	// Current layouts receive new messages: every partition needs a lane.
	Current bool
}

// Summary is the stream-wide view of the lanes that answered.
type Summary struct {
	Lanes        int
	TotalBacklog uint64
	MaxBacklog   uint64
	MeanBacklog  float64
	MaxToMean    float64 // 1.0 is perfectly even
	Hottest      string  // the lane with the largest backlog
	AtCap        int
	Paused       int
	Unavailable  int // missing or offline
	Critical     int // findings by severity
	Warnings     int
	Infos        int
}

// Report is everything inspect shows about one stream's lanes.
type Report struct {
	Stream       string
	Time         time.Time // when the read finished (client clock)
	LastSeq      uint64    // the stream's last sequence
	Messages     uint64
	Subjects     int // distinct subjects stored
	MaxConsumers int // the stream's max_consumers (-1: unlimited)
	Replicas     int // the stream's replicas
	Consumers    int // every consumer of the stream, lanes or not
	Layouts      []Layout
	Lanes        []Lane
	Summary      Summary
	Findings     []Finding
	// Requests is how many API requests the read took.
	Requests int
	// Interval is the time since the previous report, when rates were
	// computed (watch mode); zero otherwise.
	Interval time.Duration
	// Places is where Options.Key goes, when it was asked: the report then
	// has only the lanes that hold it.
	Places []KeyPlace
	// Workers are the lanes work instances of each design of the lanes,
	// with what they parked; WorkersUnknown says why the membership could
	// not be read (who serves the lanes is then unknown).
	Workers        []Workers
	WorkersUnknown string
}

// Lane returns the named lane, or nil.
func (r *Report) Lane(name string) *Lane {
	for i := range r.Lanes {
		if r.Lanes[i].Name == name {
			return &r.Lanes[i]
		}
	}
	return nil
}

// Summarize recomputes the summary from the lanes and findings; Judge calls
// it, and so may code that builds or filters a Report.
func (r *Report) Summarize() {
	s := Summary{}
	for _, l := range r.Lanes {
		if l.State != StateOK {
			s.Unavailable++
			continue
		}
		s.Lanes++
		s.TotalBacklog += l.Backlog
		if l.Backlog > s.MaxBacklog || s.Hottest == "" {
			s.MaxBacklog, s.Hottest = l.Backlog, l.Name
		}
		if l.AtCap() {
			s.AtCap++
		}
		if l.Paused {
			s.Paused++
		}
	}
	if s.MaxBacklog == 0 {
		s.Hottest = ""
	}
	if s.Lanes > 0 {
		s.MeanBacklog = float64(s.TotalBacklog) / float64(s.Lanes)
	}
	if s.MeanBacklog > 0 {
		s.MaxToMean = float64(s.MaxBacklog) / s.MeanBacklog
	}
	for _, f := range r.Findings {
		switch f.Severity {
		case Critical:
			s.Critical++
		case Warning:
			s.Warnings++
		default:
			s.Infos++
		}
	}
	r.Summary = s
}

// Only returns a copy of the report with just the named lanes, the
// findings about them, and the stream-wide findings (a gap, misplaced
// messages) that may explain them.
func (r *Report) Only(names ...string) *Report {
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	out := *r
	out.Lanes, out.Findings = nil, nil
	for _, l := range r.Lanes {
		if keep[l.Name] {
			out.Lanes = append(out.Lanes, l)
		}
	}
	for _, f := range r.Findings {
		if f.Lane == "" || keep[f.Lane] {
			out.Findings = append(out.Findings, f)
		}
	}
	out.Summarize()
	return &out
}

// Worst is the highest severity among the findings, and false when there are none.
func (r *Report) Worst() (Severity, bool) {
	if len(r.Findings) == 0 {
		return 0, false
	}
	w := Info
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w, true
}
