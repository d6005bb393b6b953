package converge

import (
	"context"
	"fmt"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// A lane missing from a generation that runs was deleted by hand (nats
// consumer rm) or never created (an apply stopped before it). Its
// partition keeps its messages (limits or interest retention): created at
// its generation's start like any new lane, it would deliver every one of
// them again, also those it had processed, after newer ones of the same
// keys. The server keeps nothing of a deleted consumer's position, so apply
// cannot tell how far it got: it refuses, says what is stored, and creates
// the lane only where the operator chooses (Options.MissingLaneStart).
//
// A design applied for the first time is not this case: no lane of its
// generation exists and no running use of it is recorded.

// Where a lane missing from a running generation restarts.
const (
	// RestartRecorded: after the last message lanes work recorded as
	// processed on the lane (LaneRecord.Processed).
	RestartRecorded = "recorded"
	// RestartAtStart: at its generation's start, delivering every stored
	// message of its partition again.
	RestartAtStart = "start"
	// RestartNow: after the stream's last message, read before the lane is
	// created: what its partition holds is skipped.
	RestartNow = "now"
)

// RestartChoices are the values of Options.MissingLaneStart.
var RestartChoices = []string{RestartRecorded, RestartNow, RestartAtStart}

// LaneRecord is what lanes work last recorded about a lane in its
// membership bucket: the instance that served it, since when, and the
// stream sequence of the last message of the lane it processed (recorded
// every few seconds: a lower bound).
type LaneRecord struct {
	Instance string    `json:"instance"`
	Since    time.Time `json:"since"`
	// Processed: every message of the lane up to this stream sequence was
	// processed (acked); 0 when not recorded.
	Processed uint64 `json:"processed_seq,omitempty"`
}

// MissingLane is what apply knows of a lane missing from a generation that
// runs, and where the lane restarts.
type MissingLane struct {
	// Filter is its partition's stored subjects.
	Filter string `json:"filter"`
	// From is its generation's start (at least 1): where any new lane of
	// the generation starts.
	From uint64 `json:"from_seq"`
	// Stored is how many messages its partition holds from From on;
	// FirstSeq is the first of them (0: none). Not Counted: the stream
	// does not allow direct gets, or it was not read.
	Stored   uint64 `json:"stored"`
	Counted  bool   `json:"counted"`
	FirstSeq uint64 `json:"first_seq,omitempty"`
	// Worker is what lanes work recorded about the lane, if anything.
	Worker *LaneRecord `json:"lanes_work,omitempty"`
	// Start is how it restarts (recorded, start, now); empty when apply
	// refuses, or when nothing is stored (it starts at From).
	Start string `json:"start,omitempty"`
	// RestartSeq is the first stream sequence the new lane delivers.
	// Delivered and Skipped split the stored messages at it.
	RestartSeq uint64 `json:"restart_seq,omitempty"`
	Delivered  uint64 `json:"delivered"`
	Skipped    uint64 `json:"skipped"`
}

// StoredKey is a count Compare reads for a missing lane: the messages
// stored on its partition's subjects from a stream sequence on.
type StoredKey struct {
	Filter string
	From   uint64
}

// generationRuns reports whether the planned generation is in use, so
// that a lane missing from it may have processed messages its partition
// still holds: no repartition is under way (its new lanes are held and
// deliver nothing), acked messages stay stored (not workqueue), and some
// lane of the generation exists (tagged, or made by hand under a lane's
// name) or a running use of it is recorded.
func (d *Diff) generationRuns(inv *inventory, rp *repartitionState) bool {
	n := d.plan.Design.Partitions
	if rp != nil || d.live.Stream == nil || d.retention() == "workqueue" {
		return false
	}
	if inv.generations()[n] || d.generationRecord(n).Current() {
		return true
	}
	for _, c := range d.plan.Consumers {
		if inv.byName[c.Durable] != nil {
			return true
		}
	}
	return false
}

// missingLane decides about planned lane lc, which has no consumer while
// its generation runs and would be created at the generation's start.
func (d *Diff) missingLane(lc *LaneChange, start uint64) {
	m := &MissingLane{Filter: lc.want.FilterSubject, From: max(start, 1)}
	lc.Missing = m
	st, read := d.live.Stored[StoredKey{m.Filter, m.From}]
	m.Stored, m.Counted, m.FirstSeq = st.Count, read && st.Counted, st.First
	if rec, ok := d.live.LaneRecords[lc.Name]; ok {
		m.Worker = &rec
	}
	if m.Counted && m.Stored == 0 {
		lc.Reason = fmt.Sprintf("missing while its generation runs (deleted by hand?): nothing is stored on its partition from stream seq %d, where it starts like any new lane", m.From)
		return
	}
	switch d.opts.MissingLaneStart {
	case RestartAtStart:
		m.Start, m.RestartSeq, m.Delivered = RestartAtStart, m.From, m.Stored
	case RestartNow:
		m.Start, m.RestartSeq, m.Skipped = RestartNow, d.live.Stream.LastSeq+1, m.Stored
	case RestartRecorded:
		if m.Worker == nil || m.Worker.Processed == 0 {
			lc.Action = ActionRefused
			lc.Reason = fmt.Sprintf("%s is %s: --missing-lane-start recorded restarts it after the last message lanes work recorded as processed, and lanes work has recorded no position for it (%s). Choose now, which skips %s, or start, which delivers them all again",
				lc.Name, d.missingWhy(m), d.workerText(lc.Name), m.storedText())
			return
		}
		m.Start, m.RestartSeq = RestartRecorded, restartAfter(m.Worker, m.From)
		at, ok := d.live.Stored[StoredKey{m.Filter, m.RestartSeq}]
		m.Counted = m.Counted && ok && at.Counted
		m.Delivered = min(at.Count, m.Stored)
		m.Skipped = m.Stored - m.Delivered
	default:
		lc.Action = ActionRefused
		lc.Reason = fmt.Sprintf("%s is %s: created at its generation's start it would deliver %s again, also those it had processed, out of order. "+
			"Choose where it restarts with --missing-lane-start: recorded (after the last message lanes work recorded as processed), now (skip them) or start (deliver them all again)",
			lc.Name, d.missingWhy(m), m.storedText())
		return
	}
	lc.Reason = m.restartText()
}

// restartAfter is where a lane restarts after the position lanes work
// recorded: never before its generation's start.
func restartAfter(rec *LaneRecord, from uint64) uint64 { return max(rec.Processed+1, from) }

// missingWhy says why a lane is missing, and what lanes work knows of it.
func (d *Diff) missingWhy(m *MissingLane) string {
	why := fmt.Sprintf("missing while its generation %s runs (deleted by hand, e.g. nats consumer rm, or an earlier apply stopped before creating it)", planner.Generation(d.plan.Design.Partitions))
	if w := m.Worker; w != nil {
		why += fmt.Sprintf("; lanes work served it (instance %s since %s)", w.Instance, w.Since.UTC().Format(time.RFC3339))
	}
	return why
}

// workerText says why no recorded position is known for a lane.
func (d *Diff) workerText(lane string) string {
	switch _, ok := d.live.LaneRecords[lane]; {
	case d.live.LaneRecordsErr != "":
		return "its records could not be read: " + d.live.LaneRecordsErr
	case ok:
		return "the lane's record in " + workBucket + " says which instance served it and since when, not how far it got"
	}
	return "no record of the lane in " + workBucket
}

// workBucket is lanes work's membership bucket (work.Bucket), named in
// explanations.
const workBucket = "lanes_work"

// storedText says what a missing lane's partition holds.
func (m *MissingLane) storedText() string {
	switch {
	case m.Counted:
		return fmt.Sprintf("the %d messages stored on its partition from stream seq %d (%s)", m.Stored, m.FirstSeq, m.Filter)
	case m.FirstSeq > 0:
		return fmt.Sprintf("the messages stored on its partition from stream seq %d (%s; the stream does not allow direct gets, so apply cannot count them)", m.FirstSeq, m.Filter)
	}
	return fmt.Sprintf("the messages stored on its partition from stream seq %d on (%s; not counted)", m.From, m.Filter)
}

// restartText says where a missing lane restarts and what that delivers.
func (m *MissingLane) restartText() string {
	switch m.Start {
	case RestartAtStart:
		return fmt.Sprintf("was missing: restarts at stream seq %d, its generation's start (--missing-lane-start start), and delivers %s again, also those it had processed", m.RestartSeq, m.storedText())
	case RestartNow:
		return fmt.Sprintf("was missing: restarts at stream seq %d, after the stream's last message (--missing-lane-start now), and skips %s", m.RestartSeq, m.storedText())
	case RestartRecorded:
		if !m.Counted {
			return fmt.Sprintf("was missing: restarts at stream seq %d, after the last message lanes work recorded as processed (--missing-lane-start recorded); of %s, it delivers those from seq %d", m.RestartSeq, m.storedText(), m.RestartSeq)
		}
		return fmt.Sprintf("was missing: restarts at stream seq %d, after the last message lanes work recorded as processed (--missing-lane-start recorded); of %s, it delivers %d and skips %d", m.RestartSeq, m.storedText(), m.Delivered, m.Skipped)
	}
	return ""
}

// missing is the lanes of the diff missing from a running generation.
func (d *Diff) missing() []*LaneChange {
	var out []*LaneChange
	for i := range d.Lanes {
		if d.Lanes[i].Missing != nil {
			out = append(out, &d.Lanes[i])
		}
	}
	return out
}

// readMissing reads what Compute needs to say what the partitions of
// missing lanes hold: what lanes work recorded about the design's lanes
// (Options.LaneRecords), and a count of each partition's messages from
// the generation's start, and from the position lanes work recorded.
// Nothing is written.
func readMissing(ctx context.Context, conn *connect.Conn, p *planner.Plan, live *Live, o Options, lanes []*LaneChange) error {
	read := o.LaneRecords
	if read == nil {
		read = membershipRecords(conn)
	}
	recs, err := read(ctx, p.Stream.Name, p.Design.Name)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		live.LaneRecordsErr = err.Error()
	}
	live.LaneRecords = recs
	a := jsapi.New(conn)
	live.Stored = map[StoredKey]jsapi.Stored{}
	for _, l := range lanes {
		keys := []StoredKey{{l.Missing.Filter, l.Missing.From}}
		if rec, ok := live.LaneRecords[l.Name]; ok && rec.Processed > 0 {
			keys = append(keys, StoredKey{l.Missing.Filter, restartAfter(&rec, l.Missing.From)})
		}
		for _, k := range keys {
			st, err := a.StoredFrom(ctx, p.Stream.Name, k.From, k.Filter, live.Stream.Config.AllowDirect)
			live.Requests++
			if err != nil {
				return fmt.Errorf("reading what missing lane %s's partition holds: %w", l.Name, err)
			}
			live.Stored[k] = st
		}
	}
	return nil
}

// membershipRecords reads what lanes work recorded about a design's lanes
// in its membership bucket: which instance served each, since when, and
// the last message it processed (recorded every work.RecordEvery at most,
// at a hand-over, and when the lane was deleted: that record is kept for a
// week).
func membershipRecords(conn *connect.Conn) func(ctx context.Context, stream, design string) (map[string]LaneRecord, error) {
	return func(ctx context.Context, stream, design string) (map[string]LaneRecord, error) {
		sv, err := membership.ReadServing(ctx, conn.JS, stream, design)
		if err != nil {
			return nil, err
		}
		out := make(map[string]LaneRecord, len(sv.Lanes))
		for lane, ls := range sv.Lanes {
			out[lane] = LaneRecord{Instance: ls.Instance, Since: ls.Since, Processed: ls.Processed}
		}
		return out, nil
	}
}

// createMissing creates a lane missing from a running generation where it
// restarts, checking that the server did not hand it the deleted lane's
// state (createAt). It keeps its generation's start in its metadata (the
// start of the lanes created after it), and only its own position differs.
func (x *executor) createMissing(ctx context.Context, l *LaneChange) error {
	body := createBody(l.want, l.Held, l.StartSeq)
	if at := l.Missing.RestartSeq; at > max(l.StartSeq, 1) {
		body["deliver_policy"], body["opt_start_seq"] = raw("by_start_sequence"), raw(at)
	}
	if err := x.createAt(ctx, l.Name, body); err != nil {
		return err
	}
	x.count(func(r *Result) {
		r.Created++
		if l.Missing.Start != "" {
			r.Warnings = append(r.Warnings, l.Name+" "+l.Reason)
		}
	})
	return nil
}
