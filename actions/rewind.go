package actions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// A rewind sets lanes back to a stream sequence with the server's consumer
// reset (CONSUMER.RESET, nats-server 2.14+, ADR-60). What the reset does,
// read in nats-server 2.15.2 (consumer.go, resetStartingSeqLocked and
// resetLocalStartingSeq): the sequence is a stream sequence; the next
// delivery is the first message of the lane's filter at or after it; the
// ack floor becomes seq-1; everything out (ack pending) and every
// redelivery count is forgotten; the consumer's delivery sequence starts
// again at 1; pull requests waiting stay and are served at once. A
// consumer that delivers by start sequence refuses a point below it.
//
// An ack for a delivery made before the reset is matched by stream
// sequence only: at or above the consumer's next sequence it is ignored
// (and never answered); below it, it settles the message delivered again
// under that sequence. So a worker that holds a message at the moment of
// the reset could, with a pull request waiting, have the redelivered
// message acked by its late ack: that message would not run again. A
// rewind therefore pauses its lanes (lanes work follows the pause: it
// finishes what it holds, acks it, pulls nothing more), waits until
// nothing is out, resets them while paused and resumes them: the workers
// pull again on the resume advisory and take the messages from the point
// on in stream order, so each key's in its order. Nothing is stopped or
// redeployed. A lane an operator paused stays paused; it runs the
// messages again once resumed.
//
// The pause is recorded in the membership bucket as "lanes rewind"
// (inspect shows it): a rewind killed midway leaves its lanes paused, not
// half of them replaying, and a re-run finishes it (a reset repeated on a
// lane still paused since its first reset changes nothing). A rewind holds
// the stream's apply lock while it acts, so that two rewinds (or a rewind
// and an apply, which may repartition) never interleave: the second is
// refused.

// RewindBy is who pauses the lanes during a rewind, in their pause record.
const RewindBy = "lanes rewind"

// RewindOptions say where to rewind to: a stream sequence, or a time (the
// first message stored at or after it).
type RewindOptions struct {
	ToSeq  uint64
	ToTime time.Time
	DryRun bool
	// Drain is how long to wait for the workers to finish the messages
	// they hold once the lanes are paused (0: 30s). A message still out
	// then is run again from the point like the others.
	Drain time.Duration
}

// RewindLane is a rewind of one lane: its position now, after, and how
// many messages run again.
type RewindLane struct {
	Lane      string `json:"lane"`
	AckFloor  uint64 `json:"ack_floor"` // stream sequence: everything up to here was acknowledged
	Delivered uint64 `json:"delivered"` // stream sequence of the last delivery
	// To is the stream sequence the lane restarts at (its ack floor
	// becomes To-1); 0 when the lane is left as it is.
	To uint64 `json:"to,omitempty"`
	// Again is how many of the lane's messages run again (-1: unknown,
	// the stream does not allow direct gets to count them).
	Again   int64  `json:"again"`
	Changed bool   `json:"changed"`
	Note    string `json:"note,omitempty"`
}

// RewindOutcome is a rewind's result on its lanes.
type RewindOutcome struct {
	Stream  string       `json:"stream"`
	Design  string       `json:"design"`
	DryRun  bool         `json:"dry_run"`
	Seq     uint64       `json:"seq"`            // the point, as a stream sequence
	Time    *time.Time   `json:"time,omitempty"` // the point asked, for --to-time
	Lanes   []RewindLane `json:"lanes"`
	Changed int          `json:"changed"` // lanes rewound (or that would be)
	Again   int64        `json:"again"`   // messages that run again, on every lane (-1: unknown)
}

// rewinder holds what a rewind reads once.
type rewinder struct {
	c      *connect.Conn
	api    *jsapi.Client
	sel    *Selection
	o      RewindOptions
	stream *jetstream.StreamInfo
	out    *RewindOutcome
}

// Rewind sets the selected lanes back to a point (see the comment at the
// top of this file). Everything is checked on every lane before any lane
// is changed; a refusal changes nothing.
func Rewind(ctx context.Context, c *connect.Conn, sel *Selection, o RewindOptions) (*RewindOutcome, error) {
	r := &rewinder{c: c, api: jsapi.New(c), sel: sel, o: o}
	if o.Drain <= 0 {
		r.o.Drain = 30 * time.Second
	}
	if err := r.readStream(ctx); err != nil {
		return nil, err
	}
	if err := r.point(ctx); err != nil {
		return nil, err
	}
	if err := r.checkLanes(); err != nil {
		return nil, err
	}
	if err := r.plan(ctx); err != nil {
		return nil, err
	}
	if o.DryRun || r.out.Changed == 0 && !r.anyOurs() {
		return r.out, nil
	}
	if !serverAtLeast(c.NC.ConnectedServerVersion(), 2, 14) {
		return nil, refusedf("nats-server %s has no consumer reset (2.14 or newer): nothing was changed. Upgrade the server; lanes does not rewind by deleting and re-creating lanes, which would lose their pause and settings", c.NC.ConnectedServerVersion())
	}
	lock, err := converge.AcquireLock(ctx, c, r.out.Stream, lockOwner(r.out.Design), converge.LockOptions{})
	var locked *converge.LockedError
	if errors.As(err, &locked) {
		return nil, refusedf("another lanes apply or rewind is acting on stream %s: %s; nothing was changed. Run it again once that one is done (lanes inspect shows the lanes it paused)", r.out.Stream, locked.Holder)
	}
	if err != nil {
		return nil, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	return r.out, r.act(ctx)
}

// lockOwner is this process as the holder of the stream's lock.
func lockOwner(design string) converge.LockOwner {
	host, _ := os.Hostname()
	return converge.LockOwner{Host: host, PID: os.Getpid(), Design: design, Command: RewindBy}
}

func (r *rewinder) readStream(ctx context.Context) error {
	info, err := r.api.StreamInfo(ctx, r.sel.Report.Stream)
	if err != nil {
		return err
	}
	r.stream = info
	r.out = &RewindOutcome{Stream: info.Config.Name, Design: r.sel.Lanes[0].Design, DryRun: r.o.DryRun}
	switch info.Config.Retention {
	case jetstream.WorkQueuePolicy:
		return refusedf("stream %s has workqueue retention: it deletes every message once a lane acknowledged it, so there is nothing to run again; nothing was changed", info.Config.Name)
	case jetstream.InterestPolicy:
		return refusedf("stream %s has interest retention: it deletes a message once every consumer acknowledged it, so a rewind cannot tell which messages are still there; nothing was changed", info.Config.Name)
	}
	return nil
}

// point turns --to-seq or --to-time into the stream sequence to rewind to.
func (r *rewinder) point(ctx context.Context) error {
	last := r.stream.State.LastSeq
	if !r.o.ToTime.IsZero() {
		if r.o.ToTime.After(time.Now()) {
			return inputErrorf("--to-time %s is in the future", r.o.ToTime.Format(time.RFC3339))
		}
		t := r.o.ToTime.UTC()
		r.out.Time = &t
		seq, err := r.seqAt(ctx, t)
		if err != nil {
			return err
		}
		r.out.Seq = seq
		// Messages removed before the stream's first one may have been
		// stored after the time asked: the first message found cannot
		// tell.
		first := r.stream.State.FirstSeq
		if seq == first && first > 1 && t.Before(r.stream.State.FirstTime) {
			return refusedf("stream %s no longer has every message since %s: its first message (seq %d) was stored at %s and the %d before it were removed by its limits (%s); nothing was changed. Rewind to %s or later, or --to-seq %d",
				r.out.Stream, t.Format(time.RFC3339), first, r.stream.State.FirstTime.UTC().Format(time.RFC3339), first-1, limits(r.stream.Config), r.stream.State.FirstTime.UTC().Format(time.RFC3339), first)
		}
		return nil
	}
	switch {
	case r.o.ToSeq == 0:
		return inputErrorf("--to-seq 0: stream sequences start at 1")
	case r.o.ToSeq > last:
		return inputErrorf("--to-seq %d is beyond stream %s's last sequence %d", r.o.ToSeq, r.out.Stream, last)
	}
	r.out.Seq = r.o.ToSeq
	return nil
}

// seqAt is the stream sequence of the first message stored at or after t
// (the stream's last sequence + 1 when there is none): STREAM.MSG.GET
// with start_time, which nats-server 2.15 resolves with the store's
// GetSeqFromTime.
func (r *rewinder) seqAt(ctx context.Context, t time.Time) (uint64, error) {
	var answer struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
	}
	err := r.api.Read(ctx, "STREAM.MSG.GET."+r.out.Stream, map[string]any{"start_time": t}, &answer)
	if jsapi.IsMessageNotFound(err) {
		return r.stream.State.LastSeq + 1, nil
	}
	if err != nil {
		return 0, err
	}
	if answer.Message == nil {
		return 0, errors.New("unreadable answer to STREAM.MSG.GET: no message")
	}
	return answer.Message.Seq, nil
}

// checkLanes refuses lanes a rewind must not touch: held by apply, or of
// two generations at once.
func (r *rewinder) checkLanes() error {
	for _, l := range r.sel.Lanes {
		if l.Held != "" {
			return refusedf("lane %s is held by lanes apply for a %s: rewinding it before the old lanes drained would mix the two partitionings; nothing was changed. Rewind once apply finished", l.Name, l.Held)
		}
		if l.State == health.StateOffline {
			return refusedf("lane %s is offline (%s): it cannot be rewound now; nothing was changed", l.Name, l.Reason)
		}
		if p := r.sel.Lanes[0].Partitions; l.Partitions != p {
			return refusedf("lanes %s (%d partitions) and %s (%d partitions) are of two partitionings: a rewind never mixes generations, since a key's messages are in one or the other; rewind each partitioning's lanes on their own; nothing was changed", r.sel.Lanes[0].Name, p, l.Name, l.Partitions)
		}
	}
	return nil
}

// plan reads each lane and decides where it goes; it refuses a point
// before a lane's generation began or that retention removed.
func (r *rewinder) plan(ctx context.Context) error {
	r.out.Lanes, r.out.Changed, r.out.Again = nil, 0, 0
	gens := planner.Generations(r.stream.Config.Metadata)[r.out.Design]
	for _, l := range r.sel.Lanes {
		ci, err := r.api.ConsumerInfo(ctx, r.out.Stream, l.Name)
		if err != nil {
			return fmt.Errorf("reading lane %s: %w", l.Name, err)
		}
		if p := ci.Config.DeliverPolicy; p != jetstream.DeliverAllPolicy && p != jetstream.DeliverByStartSequencePolicy {
			return refusedf("lane %s delivers %q: the server rewinds only lanes that deliver all or from a start sequence; nothing was changed", l.Name, p.String())
		}
		start := generationStart(ci.Config, gens[l.Partitions])
		if r.out.Seq < start {
			return refusedf("lane %s belongs to the partitioning in %d lanes that began at stream sequence %d; the point, seq %d, is before it: messages before then were run by the lanes of an earlier partitioning, and a rewind never mixes generations (a key's messages of both would not be in one lane, in order); nothing was changed. Rewind to --to-seq %d or later",
				l.Name, l.Partitions, start, r.out.Seq, start)
		}
		rl := r.lanePlan(ci)
		if rl.To > 0 && rl.To < r.stream.State.FirstSeq {
			first := r.stream.State.FirstSeq
			return refusedf("lane %s cannot run again from seq %d: stream %s no longer has seqs %d to %d (%d messages, of every lane, removed by its limits: %s); its first sequence is %d; nothing was changed. Rewind to --to-seq %d or later",
				l.Name, rl.To, r.out.Stream, rl.To, first-1, first-rl.To, limits(r.stream.Config), first, first)
		}
		if rl.Changed {
			rl.Again = r.again(ctx, ci, rl.To)
		}
		r.add(rl, ci)
	}
	return nil
}

// add appends a lane's plan to the outcome.
func (r *rewinder) add(rl RewindLane, ci *jetstream.ConsumerInfo) {
	if rl.Note == "" && r.ours(ci) {
		rl.Note = "paused by an interrupted rewind: resumed"
	}
	r.out.Lanes = append(r.out.Lanes, rl)
	if rl.Changed {
		r.out.Changed++
	}
	switch {
	case r.out.Again < 0:
	case rl.Again < 0:
		r.out.Again = -1
	default:
		r.out.Again += rl.Again
	}
}

// lanePlan decides where a lane goes from its position now. A rewind
// never skips a message the lane has not settled: the lane goes to the
// point if it acknowledged everything before it; to just above its ack
// floor if it has messages out or settled out of order (a key-parallel
// lane) across the point, so that each runs again; and nowhere if it
// delivered nothing at or after the point.
func (r *rewinder) lanePlan(ci *jetstream.ConsumerInfo) RewindLane {
	rl := RewindLane{Lane: ci.Name, AckFloor: ci.AckFloor.Stream, Delivered: ci.Delivered.Stream}
	p := r.out.Seq
	switch {
	case r.ours(ci) && ci.Delivered.Consumer == 0 && rl.AckFloor+1 == p:
		// An interrupted rewind left it paused at the point, and it has
		// delivered nothing since: resetting it again changes nothing.
		rl.Note = "already at the point (an interrupted rewind): resumed"
		return rl
	case rl.Delivered < p:
		rl.Note = "delivered nothing at or after the point: left as it is"
		return rl
	case rl.AckFloor+1 >= p:
		rl.To = p
	default:
		rl.To = rl.AckFloor + 1
		rl.Note = fmt.Sprintf("from its ack floor: messages out from seq %d", rl.To)
	}
	rl.Changed = true
	return rl
}

// again counts the lane's messages that run again: those on its filter
// from seq on, less those it has not run yet (pending) and those out. One
// batched direct get (jsapi.StoredFrom) counts them on the server without
// reading them; a stream without direct gets cannot count (-1).
func (r *rewinder) again(ctx context.Context, ci *jetstream.ConsumerInfo, seq uint64) int64 {
	filter := ci.Config.FilterSubject
	if filter == "" && len(ci.Config.FilterSubjects) == 1 {
		filter = ci.Config.FilterSubjects[0]
	}
	if filter == "" {
		filter = ">"
	}
	st, err := r.api.StoredFrom(ctx, r.out.Stream, seq, filter, r.stream.Config.AllowDirect)
	if err != nil || !st.Counted {
		return -1
	}
	return max(int64(st.Count)-int64(ci.NumPending)-int64(ci.NumAckPending), 0)
}

// ours: the lane is paused by a rewind (an interrupted one).
func (r *rewinder) ours(ci *jetstream.ConsumerInfo) bool {
	if !ci.Paused {
		return false
	}
	l := r.sel.Report.Lane(ci.Name)
	return l != nil && l.PausedBy != nil && l.PausedBy.By == RewindBy
}

func (r *rewinder) anyOurs() bool {
	for _, l := range r.sel.Lanes {
		if l.Paused && l.PausedBy != nil && l.PausedBy.By == RewindBy {
			return true
		}
	}
	return false
}

// act pauses the lanes, waits for what is out, plans again on the
// drained lanes, resets them and resumes them.
func (r *rewinder) act(ctx context.Context) error {
	stream := r.out.Stream
	// The lanes to pause and resume: those to rewind that were running,
	// and those an interrupted rewind left paused.
	var ours, pausedNow []string
	for i, l := range r.sel.Lanes {
		if r.anyOursLane(l) {
			ours = append(ours, l.Name)
			continue
		}
		if !r.out.Lanes[i].Changed || l.Paused {
			continue
		}
		rec := membership.Pause{By: RewindBy, At: time.Now().UTC(), Reason: fmt.Sprintf("rewinding to seq %d", r.out.Seq)}
		if err := membership.RecordPause(ctx, r.c.JS, stream, l.Design, l.Name, rec, max(r.sel.Report.Replicas, 1)); err != nil {
			return r.undo(pausedNow, err)
		}
		if err := r.api.PauseConsumer(ctx, stream, l.Name, time.Now().Add(Forever)); err != nil {
			return r.undo(pausedNow, fmt.Errorf("pausing lane %s: %w", l.Name, err))
		}
		ours, pausedNow = append(ours, l.Name), append(pausedNow, l.Name)
	}
	r.drain(ctx)
	// Plan again: the workers acked what they held, the floors moved.
	before := r.out.Lanes
	if err := r.plan(ctx); err != nil {
		return r.undo(pausedNow, err)
	}
	for i, rl := range r.out.Lanes {
		if before[i].Changed && !rl.Changed {
			// Drained up to the point only now: it still runs nothing
			// again, but say so rather than hide it.
			r.out.Lanes[i].Note = "its workers were still running up to the point: left as it is"
		}
		if !rl.Changed {
			continue
		}
		if err := r.reset(ctx, rl.Lane, rl.To); err != nil {
			return fmt.Errorf("%w (lanes rewound before it stay paused, as lanes inspect shows: run the same rewind again to finish)", err)
		}
	}
	for _, name := range ours {
		if err := r.api.PauseConsumer(ctx, stream, name, time.Time{}); err != nil {
			return fmt.Errorf("resuming lane %s after its rewind: %w (run the same rewind again to finish)", name, err)
		}
		if err := membership.ForgetPause(ctx, r.c.JS, stream, r.out.Design, name); err != nil {
			return err
		}
	}
	return nil
}

func (r *rewinder) anyOursLane(l *health.Lane) bool {
	return l.Paused && l.PausedBy != nil && l.PausedBy.By == RewindBy
}

// undo resumes the lanes this run paused before anything was reset, and
// returns err. Lanes an interrupted rewind left paused stay so: some may
// be reset already.
func (r *rewinder) undo(paused []string, err error) error {
	ctx, cancel := r.c.Ctx(context.Background())
	defer cancel()
	for _, name := range paused {
		if r.api.PauseConsumer(ctx, r.out.Stream, name, time.Time{}) == nil {
			_ = membership.ForgetPause(ctx, r.c.JS, r.out.Stream, r.out.Design, name)
		}
	}
	return err
}

// drain waits until no lane to rewind has a message out (its worker
// finished and acked it), for at most Drain.
func (r *rewinder) drain(ctx context.Context) {
	deadline := time.Now().Add(r.o.Drain)
	for _, rl := range r.out.Lanes {
		if !rl.Changed {
			continue
		}
		for time.Now().Before(deadline) && ctx.Err() == nil {
			ci, err := r.api.ConsumerInfo(ctx, r.out.Stream, rl.Lane)
			if err == nil && ci.NumAckPending == 0 {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// reset is one CONSUMER.RESET to a stream sequence.
func (r *rewinder) reset(ctx context.Context, lane string, seq uint64) error {
	var answer struct {
		ResetSeq uint64 `json:"reset_seq"`
	}
	err := r.api.Write(ctx, "CONSUMER.RESET."+r.out.Stream+"."+lane, map[string]uint64{"seq": seq}, &answer)
	if e, ok := jsapi.As(err); ok && strings.Contains(strings.ToLower(e.Description), "unknown") {
		return refusedf("rewinding lane %s: the server does not know the consumer reset API (%v): it needs nats-server 2.14 or newer", lane, err)
	}
	if err != nil {
		return fmt.Errorf("rewinding lane %s to seq %d: %w", lane, seq, err)
	}
	if answer.ResetSeq != seq {
		return fmt.Errorf("rewinding lane %s: the server reset it to seq %d, not %d", lane, answer.ResetSeq, seq)
	}
	return nil
}

// generationStart is where a lane's generation began: its lanes.start_seq,
// or its start sequence, or its generation's record (1: the stream's
// beginning).
func generationStart(c jetstream.ConsumerConfig, rec planner.GenerationRecord) uint64 {
	if v, err := strconv.ParseUint(c.Metadata[planner.MetaStartSeq], 10, 64); err == nil && v > 0 {
		return v
	}
	if c.DeliverPolicy == jetstream.DeliverByStartSequencePolicy && c.OptStartSeq > 0 {
		return c.OptStartSeq
	}
	return max(rec.StartSeq, 1)
}

// limits names a stream's retention limits, for a refusal.
func limits(c jetstream.StreamConfig) string {
	var out []string
	if c.MaxMsgs > 0 {
		out = append(out, fmt.Sprintf("max_msgs %d", c.MaxMsgs))
	}
	if c.MaxBytes > 0 {
		out = append(out, fmt.Sprintf("max_bytes %d", c.MaxBytes))
	}
	if c.MaxAge > 0 {
		out = append(out, "max_age "+c.MaxAge.String())
	}
	if c.MaxMsgsPerSubject > 0 {
		out = append(out, fmt.Sprintf("max_msgs_per_subject %d", c.MaxMsgsPerSubject))
	}
	if len(out) == 0 {
		return "or a purge"
	}
	return strings.Join(out, ", ")
}

// serverAtLeast says whether a server version ("2.15.2", "2.14.0-rc.1")
// is major.minor or newer.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(strings.SplitN(version, "-", 2)[0], ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
