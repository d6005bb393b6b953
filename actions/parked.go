package actions

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// The parked messages: what lanes work put on a dead-letter subject
// (--on-poison park --dead-letter SUBJECT), with its Lanes-Parked-*
// headers. A parked message is named by its own sequence in the stream
// that stores the dead-letter subject; its origin (the design's stream
// and the sequence it had there) is in its headers.

// Headers of a replayed copy, beside the parked message's own (its
// Lanes-Parked-* say where and why it was parked): the stream and the
// sequence the message first had. A replayed copy gets a new, higher
// sequence; a version-checked handler uses Lanes-Replayed-From-Seq as the
// message's version (docs/effects.md). A copy that is parked again and
// replayed again keeps the first.
const (
	HeaderReplayedFromStream = "Lanes-Replayed-From-Stream"
	HeaderReplayedFromSeq    = "Lanes-Replayed-From-Seq"
)

// ParkedFilter chooses parked messages of the selected design: with
// Selection's --lanes and --key, by their own sequences, reason and age.
type ParkedFilter struct {
	// DeadLetter is the dead-letter subject; "" reads those the design's
	// lanes work instances name in the membership bucket.
	DeadLetter string
	Seqs       []uint64      // the parked messages' own sequences
	Reason     string        // a part of the reason, any case ("terminated", "failed")
	OlderThan  time.Duration // parked longer ago than this
	// Lanes and Keys are the target's --lanes and --key (Target): when
	// set, only the parked messages of the selected lanes, of these keys.
	Lanes []string
	Keys  []string
	// All must be set to act on every parked message of the design
	// (discard, replay) when nothing else narrows the choice.
	All bool
}

// DeadLetter is a dead-letter subject and the stream that stores it.
type DeadLetter struct {
	Subject string `json:"subject"`
	Stream  string `json:"stream"`
}

// ParkedMsg is one parked message, as its headers tell it.
type ParkedMsg struct {
	Seq        uint64 `json:"seq"` // in the dead-letter stream
	DeadLetter string `json:"dead_letter"`
	DLStream   string `json:"dead_letter_stream"`
	// Where it came from: the design's stream, its sequence and subject
	// there (as stored: partitioned), its lane and key.
	Stream    string `json:"stream"`
	OriginSeq uint64 `json:"origin_seq"`
	Subject   string `json:"subject"`
	Lane      string `json:"lane"`
	Key       string `json:"key"`
	// ReplayedFrom is the sequence the message first had, when it is a
	// replayed copy parked again; 0 otherwise.
	ReplayedFrom uint64    `json:"replayed_from_seq,omitempty"`
	Attempts     int       `json:"attempts"`
	Reason       string    `json:"reason"`
	Error        string    `json:"error,omitempty"`
	Instance     string    `json:"instance,omitempty"`
	ParkedAt     time.Time `json:"parked_at"`
	Size         int       `json:"size"` // the payload's bytes

	Header nats.Header `json:"-"`
	Data   []byte      `json:"-"`
}

// First is the sequence the message first had in its stream: its place in
// its key's order.
func (p *ParkedMsg) First() uint64 {
	if p.ReplayedFrom != 0 {
		return p.ReplayedFrom
	}
	return p.OriginSeq
}

// Parked is the parked messages of a design that a filter chose.
type Parked struct {
	Stream      string       `json:"stream"`
	Design      string       `json:"design"`
	DeadLetters []DeadLetter `json:"dead_letters"`
	Time        time.Time    `json:"time"` // when they were read (ages count from it)
	Messages    []ParkedMsg  `json:"messages"`
	// Others counts the messages on the dead-letter subjects that are not
	// this design's parked messages (another design's, or not parked by
	// lanes work).
	Others int `json:"others"`

	all []ParkedMsg // every parked message of the design, unfiltered
}

// ReadParked reads the design's parked messages and picks the filter's.
// It refuses a dead-letter subject no stream stores, and says so when no
// dead-letter subject is known.
func ReadParked(ctx context.Context, c *connect.Conn, sel *Selection, f ParkedFilter) (*Parked, error) {
	design := sel.Lanes[0].Design
	dls, err := deadLetters(ctx, c, sel, design, f.DeadLetter)
	if err != nil {
		return nil, err
	}
	out := &Parked{Stream: sel.Report.Stream, Design: design, DeadLetters: dls, Time: time.Now()}
	api := jsapi.New(c)
	for _, dl := range dls {
		for seq := uint64(1); ; {
			m, err := getMsg(ctx, api, dl.Stream, seq, dl.Subject)
			if jsapi.IsMessageNotFound(err) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading dead-letter subject %s (stream %s): %w", dl.Subject, dl.Stream, err)
			}
			seq = m.Seq + 1
			p, ok := parkedOf(m, dl)
			if !ok || p.Stream != out.Stream || !ownLane(sel, design, p.Lane) {
				out.Others++
				continue
			}
			out.all = append(out.all, p)
		}
	}
	keys := keysOf(sel, f.Keys)
	for _, p := range out.all {
		if f.picks(p, sel, keys, out.Time) {
			out.Messages = append(out.Messages, p)
		}
	}
	for _, s := range f.Seqs {
		switch n := countSeq(out.Messages, s); {
		case n == 0:
			return nil, notParked(out, s)
		case n > 1:
			return nil, inputErrorf("sequence %d names a parked message on each of %d dead-letter streams: name the dead-letter subject with --dead-letter", s, n)
		}
	}
	return out, nil
}

func countSeq(ms []ParkedMsg, seq uint64) int {
	n := 0
	for _, m := range ms {
		if m.Seq == seq {
			n++
		}
	}
	return n
}

// notParked: seq names no parked message of the design (that the other
// filters let through).
func notParked(p *Parked, seq uint64) error {
	var where []string
	for _, dl := range p.DeadLetters {
		where = append(where, dl.Subject+" (stream "+dl.Stream+")")
	}
	return inputErrorf("no parked message of design %q at sequence %d on %s (gone already? lanes parked list shows the parked messages there are, with their SEQ)", p.Design, seq, strings.Join(where, ", "))
}

// deadLetters are the dead-letter subjects to read: the one asked for, or
// those the design's instances name, each with the stream that stores it.
func deadLetters(ctx context.Context, c *connect.Conn, sel *Selection, design, asked string) ([]DeadLetter, error) {
	api := jsapi.New(c)
	if asked != "" {
		stream, err := api.StreamBySubject(ctx, asked)
		if jsapi.IsStreamNotFound(err) {
			return nil, inputErrorf("no stream stores the dead-letter subject %s", planner.Quote(asked, 200))
		}
		if err != nil {
			return nil, err
		}
		return []DeadLetter{{Subject: asked, Stream: stream}}, nil
	}
	if sel.Report.WorkersUnknown != "" {
		return nil, fmt.Errorf("the dead-letter subjects of design %q are unknown: the membership bucket could not be read (%s); name one with --dead-letter", design, sel.Report.WorkersUnknown)
	}
	var out []DeadLetter
	for _, w := range sel.Report.Workers {
		if w.Design != design {
			continue
		}
		for _, p := range w.Parked {
			if p.Stream != "" {
				out = append(out, DeadLetter{Subject: p.Subject, Stream: p.Stream})
			}
		}
	}
	if len(out) == 0 {
		return nil, inputErrorf("no dead-letter subject is known for design %q: no lanes work instance of it records one (lanes work --on-poison park --dead-letter SUBJECT), or no stream stores it; name it with --dead-letter", design)
	}
	return out, nil
}

// parkedOf reads a parked message's headers; false when it has not the
// headers lanes work gives one.
func parkedOf(m *storedMsg, dl DeadLetter) (ParkedMsg, bool) {
	h := m.Header
	p := ParkedMsg{Seq: m.Seq, DeadLetter: dl.Subject, DLStream: dl.Stream,
		Stream: h.Get(work.HeaderParkedStream), Subject: h.Get(work.HeaderParkedSubject),
		Lane: h.Get(work.HeaderParkedLane), Key: h.Get(work.HeaderParkedKey),
		Reason: h.Get(work.HeaderParkedReason), Error: h.Get(work.HeaderParkedError),
		Instance: h.Get(work.HeaderParkedInstance), Size: len(m.Data), Header: h, Data: m.Data}
	var err1, err2 error
	p.OriginSeq, err1 = strconv.ParseUint(h.Get(work.HeaderParkedSeq), 10, 64)
	p.Attempts, _ = strconv.Atoi(h.Get(work.HeaderParkedAttempts))
	p.ParkedAt, err2 = time.Parse(time.RFC3339Nano, h.Get(work.HeaderParkedAt))
	if err2 != nil {
		p.ParkedAt = m.Time // the stream's store time is as good
	}
	if v := h.Get(HeaderReplayedFromSeq); v != "" {
		p.ReplayedFrom, _ = strconv.ParseUint(v, 10, 64)
	}
	return p, err1 == nil && p.Stream != "" && p.Subject != "" && p.Lane != ""
}

// ownLane: the lane is the design's (in the report, or by its name: a
// lane of a generation since deleted is no longer in the report).
func ownLane(sel *Selection, design, lane string) bool {
	for _, l := range sel.Report.Lanes {
		if l.Name == lane {
			return l.Design == design
		}
	}
	return strings.HasPrefix(lane, design+"-n")
}

// keysOf are the keys named (--key), as the lanes' layouts read them (a
// subject as published becomes its key); Select found them all.
func keysOf(sel *Selection, named []string) map[string]bool {
	keys := map[string]bool{}
	for _, k := range named {
		keys[k] = true
		places, _ := sel.Report.Locate(k)
		for _, p := range places {
			keys[p.Key] = true
		}
	}
	return keys
}

// picks: the filter and the selection's --lanes and --key choose p.
func (f ParkedFilter) picks(p ParkedMsg, sel *Selection, keys map[string]bool, now time.Time) bool {
	if len(f.Seqs) > 0 && !slices.Contains(f.Seqs, p.Seq) {
		return false
	}
	if f.Reason != "" && !strings.Contains(strings.ToLower(p.Reason), strings.ToLower(f.Reason)) {
		return false
	}
	if f.OlderThan > 0 && now.Sub(p.ParkedAt) < f.OlderThan {
		return false
	}
	if len(f.Lanes) > 0 && !slices.Contains(sel.Names(), p.Lane) {
		return false
	}
	if len(keys) > 0 && !keys[p.Key] {
		return false
	}
	return true
}

// Counts sum parked messages up by lane, key and reason.
type Counts struct {
	Total    int            `json:"total"`
	ByLane   map[string]int `json:"by_lane"`
	ByKey    map[string]int `json:"by_key"`
	ByReason map[string]int `json:"by_reason"`
	Oldest   time.Time      `json:"oldest,omitzero"`
}

// Count sums the chosen messages up.
func (p *Parked) Count() Counts {
	c := Counts{Total: len(p.Messages), ByLane: map[string]int{}, ByKey: map[string]int{}, ByReason: map[string]int{}}
	for _, m := range p.Messages {
		c.ByLane[m.Lane]++
		c.ByKey[m.Key]++
		c.ByReason[m.Reason]++
		if c.Oldest.IsZero() || m.ParkedAt.Before(c.Oldest) {
			c.Oldest = m.ParkedAt
		}
	}
	return c
}

// ShowParked reads one parked message of the design, by its own sequence.
func ShowParked(ctx context.Context, c *connect.Conn, sel *Selection, f ParkedFilter, seq uint64) (*ParkedMsg, error) {
	f.Seqs = []uint64{seq}
	p, err := ReadParked(ctx, c, sel, f)
	if err != nil {
		return nil, err
	}
	return &p.Messages[0], nil
}

// ParkedChange is what an action did (or would do) to one parked message.
type ParkedChange struct {
	ParkedMsg
	// Done says what happened, in words: "discarded", "replayed as
	// sequence 71", "already gone", "would replay".
	Done    string `json:"done"`
	NewSeq  uint64 `json:"new_seq,omitempty"` // the replayed copy's sequence
	Changed bool   `json:"changed"`
}

// ParkedOutcome is what discard or replay did to the chosen messages.
type ParkedOutcome struct {
	Action   string         `json:"action"`
	Stream   string         `json:"stream"`
	Design   string         `json:"design"`
	DryRun   bool           `json:"dry_run"`
	Messages []ParkedChange `json:"messages"`
	Changed  int            `json:"changed"`
	// OutOfOrder are the keys whose parked messages would run after
	// messages of the key that came later (replay).
	OutOfOrder []KeyOrder `json:"out_of_order,omitempty"`
	// Quarantines are the quarantined keys the replay covered: replayed in
	// rounds, then lifted (replay).
	Quarantines []QuarantineLift `json:"quarantines,omitempty"`
}

func (o *ParkedOutcome) add(c ParkedChange) {
	o.Messages = append(o.Messages, c)
	if c.Changed {
		o.Changed++
	}
}

// mustNarrow refuses an action on every parked message of the design
// unless asked for explicitly.
func (f ParkedFilter) mustNarrow(sel *Selection, action string) error {
	if f.All || len(f.Seqs) > 0 || f.Reason != "" || f.OlderThan > 0 || len(f.Lanes) > 0 || len(f.Keys) > 0 {
		return nil
	}
	return inputErrorf("%s which parked messages? name them (--seq, --lanes, --key, --reason, --older-than), or give --all for every parked message of the design", action)
}

// DiscardParked deletes the chosen parked messages from their dead-letter
// stream. A message already gone (another operator, an earlier run) is
// said so and is no error, so a re-run finishes an interrupted discard.
func DiscardParked(ctx context.Context, c *connect.Conn, sel *Selection, f ParkedFilter, dryRun bool) (*ParkedOutcome, error) {
	if err := f.mustNarrow(sel, "discard"); err != nil {
		return nil, err
	}
	p, err := ReadParked(ctx, c, sel, f)
	if err != nil {
		return nil, err
	}
	out := &ParkedOutcome{Action: "discard", Stream: p.Stream, Design: p.Design, DryRun: dryRun}
	api := jsapi.New(c)
	for _, m := range p.Messages {
		ch := ParkedChange{ParkedMsg: m, Done: "would discard", Changed: true}
		if !dryRun {
			gone, err := deleteMsg(ctx, api, m.DLStream, m.Seq)
			if err != nil {
				return out, err
			}
			ch.Done, ch.Changed = "discarded", !gone
			if gone {
				ch.Done = "already gone"
			}
		}
		out.add(ch)
	}
	return out, nil
}

// byOrigin sorts parked messages by key, then by the sequence each first
// had: the order they are replayed in.
func byOrigin(ms []ParkedMsg) {
	sort.SliceStable(ms, func(a, b int) bool {
		if ms[a].Key != ms[b].Key {
			return ms[a].Key < ms[b].Key
		}
		return ms[a].First() < ms[b].First()
	})
}
