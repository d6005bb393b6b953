package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// recreate replaces a lane whose change the server forbids, keeping its
// position. The steps, each safe to interrupt:
//
//  1. record the recreate in a placeholder consumer <lane>-recreate
//     (metadata lanes.recreate.*: the lane, the change, the operator's
//     pause, a lower bound of the position): from here on a re-run
//     finishes the recreate, with or without --recreate, and lifts the
//     pause of step 2;
//  2. pause the lane for a few seconds (unless it is paused already), so
//     its position stops moving; wait briefly for the message in flight
//     to be acked;
//  3. read its ack floor: the new lane starts right after it; record it;
//  4. look up the lane's messages delivered after the ack floor, on its
//     filter: those are delivered again;
//  5. delete the lane, 6. create it as designed at the recorded position,
//  7. delete the placeholder.
//
// The placeholder never delivers and holds nothing: its filter matches
// none of the lane's subjects, except on an interest stream, where it
// takes the lane's filter from the position on so that deleting the lane
// does not let the server discard its messages. On a workqueue stream
// (every consumer must deliver all, and acked messages are gone) both the
// placeholder and the new lane deliver all: the lane's first message is
// then the first unacked one.
func (x *executor) recreate(ctx context.Context, l *LaneChange) error {
	operatorPause := l.operatorPause()
	ph := l.placeholder
	if ph == nil {
		cfg := x.placeholderConfig(l, l.Position.StartSeq, operatorPause)
		info, err := x.a.CreateOrUpdateConsumer(ctx, x.stream, placeholderName(l.Name), cfg)
		if err != nil {
			return fmt.Errorf("recording the recreate: %w", err)
		}
		ph = info
	}
	// The lane may be gone meanwhile (an interrupted apply's delete
	// landing after this apply listed it): the record says where it
	// restarts.
	gone := func() error {
		return x.createFromRecord(ctx, l, ph, &Position{StartSeq: placeholderStart(ph)}, operatorPause)
	}
	if operatorPause == nil && !isHeld(l.live.Config) {
		until := time.Now().Add(x.recreatePause())
		err := x.pause(ctx, l.Name, until)
		if jsapi.IsConsumerNotFound(err) {
			return gone()
		}
		if err != nil {
			return fmt.Errorf("pausing before the recreate: %w", err)
		}
	}
	info, err := x.settled(ctx, l.Name)
	if jsapi.IsConsumerNotFound(err) {
		return gone()
	}
	if err != nil {
		return err
	}
	pos := positionOf(info)
	if err := x.recordStart(ctx, ph, pos.StartSeq); err != nil {
		return fmt.Errorf("recording its position: %w", err)
	}
	pos.Redelivered, pos.RedeliveredMore = x.redelivered(ctx, l.want.FilterSubject, pos.StartSeq, info.Delivered.Stream)
	if err := x.deleteConsumer(ctx, l.Name); err != nil {
		return err
	}
	if err := x.createAt(ctx, l.Name, x.recreateBody(l, operatorPause, pos.StartSeq)); err != nil {
		return err
	}
	if err := x.deleteConsumer(ctx, ph.Name); err != nil {
		return err
	}
	x.count(func(r *Result) { r.Recreated = append(r.Recreated, Recreated{Lane: l.Name, Position: *pos}) })
	return nil
}

// finish completes a recreate that was interrupted after the lane was
// deleted: the placeholder says where the lane restarts.
func (x *executor) finish(ctx context.Context, l *LaneChange) error {
	return x.createFromRecord(ctx, l, l.placeholder, l.Position, l.operatorPause())
}

// createFromRecord creates a lane at the position its recreate record
// holds, then deletes the record.
func (x *executor) createFromRecord(ctx context.Context, l *LaneChange, ph *jetstream.ConsumerInfo, pos *Position, pause *time.Time) error {
	if err := x.createAt(ctx, l.Name, x.recreateBody(l, pause, pos.StartSeq)); err != nil {
		return err
	}
	if err := x.deleteConsumer(ctx, ph.Name); err != nil {
		return err
	}
	x.count(func(r *Result) { r.Recreated = append(r.Recreated, Recreated{Lane: l.Name, Position: *pos}) })
	return nil
}

// cleanUpRecreate ends an interrupted recreate whose lane needs no
// recreate any more (it was recreated, or the design changed back): the
// pause that recreate put on the lane is lifted (an operator's pause
// restored), then its record is deleted.
func (x *executor) cleanUpRecreate(ctx context.Context, l *LaneChange) error {
	if l.live != nil && !l.Held && appPaused(l.placeholder, l.live.Config) {
		var until time.Time
		if p := l.operatorPause(); p != nil {
			until = *p
		}
		if err := x.pause(ctx, l.Name, until); err != nil {
			return fmt.Errorf("lifting the pause of an interrupted recreate: %w", err)
		}
	}
	return x.deleteConsumer(ctx, l.placeholder.Name)
}

// settleWait bounds the wait for a paused lane's message in flight to be
// acked before its position is read: an ack that comes later makes that
// message a redelivery of the recreated lane.
const settleWait = 2 * time.Second

// settled reads a paused lane once the server reports it paused (in a
// cluster the pause takes effect a moment after it is answered) and its
// message in flight is acked, or nobody is pulling (no worker to ack it),
// or settleWait has passed.
func (x *executor) settled(ctx context.Context, name string) (*jetstream.ConsumerInfo, error) {
	deadline := time.Now().Add(settleWait)
	for {
		info, err := x.a.ConsumerInfo(ctx, x.stream, name)
		if err != nil {
			return nil, fmt.Errorf("reading its position: %w", err)
		}
		quiet := info.Paused && (info.NumAckPending == 0 || info.NumWaiting == 0)
		if quiet || !time.Now().Before(deadline) {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// recordStart writes the exact start into the placeholder's metadata.
func (x *executor) recordStart(ctx context.Context, ph *jetstream.ConsumerInfo, start uint64) error {
	meta := ph.Config.Metadata
	if meta[planner.MetaRecreateExact] == "true" && meta[planner.MetaRecreateStartSeq] == strconv.FormatUint(start, 10) {
		return nil
	}
	body := toMap(ph.Config)
	setMeta(body, planner.MetaRecreateStartSeq, strconv.FormatUint(start, 10))
	setMeta(body, planner.MetaRecreateExact, "true")
	_, err := x.a.UpdateConsumer(ctx, x.stream, ph.Name, body)
	return err
}

// maxRedeliveredLookups bounds the message lookups naming what a
// recreated lane delivers again.
const maxRedeliveredLookups = 16

// redelivered names the lane's messages from start up to its last
// delivery: stored on its filter, delivered, and about to be delivered
// again. Other partitions' messages in that range are not the lane's.
func (x *executor) redelivered(ctx context.Context, filter string, start, delivered uint64) ([]uint64, bool) {
	out := []uint64{}
	for seq := start; seq <= delivered; {
		if len(out) == maxRedeliveredLookups {
			return out, true
		}
		m, err := x.a.NextMsg(ctx, x.stream, seq, filter, false)
		if err != nil || m.Seq == 0 || m.Seq > delivered {
			return out, false // gone (a workqueue acked it, limits removed it) or none left
		}
		out = append(out, m.Seq)
		seq = m.Seq + 1
	}
	return out, false
}

// createAt creates a lane and checks that it really starts where it
// should. A create that races with the deletion of the consumer of the
// same name (a previous, interrupted apply's delete still running on the
// server) can pick up the deleted consumer's stale state from disk: the
// lane would then start elsewhere. A new lane has delivered nothing; if
// it has, it is deleted and created again.
func (x *executor) createAt(ctx context.Context, name string, body map[string]json.RawMessage) error {
	const attempts = 3
	for i := 1; ; i++ {
		info, err := x.a.CreateConsumer(ctx, x.stream, name, body)
		if err != nil {
			return err
		}
		if info.Delivered.Consumer == 0 && info.NumAckPending == 0 {
			return nil
		}
		if i == attempts {
			return fmt.Errorf("the server keeps an old state for %s (delivered stream sequence %d): delete it and re-run apply", name, info.Delivered.Stream)
		}
		if err := x.deleteConsumer(ctx, name); err != nil {
			return err
		}
	}
}

// recreatePause covers the steps from the pause to the delete; if apply
// dies meanwhile the lane resumes by itself soon after (and a re-run lifts
// the pause at once).
func (x *executor) recreatePause() time.Duration {
	return settleWait + 3*x.a.Conn().Timeout
}

func pausedNow(c jetstream.ConsumerConfig) bool {
	return c.PauseUntil != nil && c.PauseUntil.After(time.Now())
}

// operatorPause is a pause the lane had before apply touched it, to keep
// through the recreate: from the record of an interrupted recreate, else
// from the lane itself (not a repartition hold, which is apply's own).
func (l *LaneChange) operatorPause() *time.Time {
	if l.placeholder != nil {
		t, err := time.Parse(time.RFC3339Nano, l.placeholder.Config.Metadata[planner.MetaRecreatePauseTill])
		if err != nil || !t.After(time.Now()) {
			return nil
		}
		return &t
	}
	if l.live != nil && pausedNow(l.live.Config) && !isHeld(l.live.Config) {
		return l.live.Config.PauseUntil
	}
	return nil
}

// appPaused reports whether a lane carries the pause of an interrupted
// recreate (its record says apply paused it, and it is paused, not held,
// not at the operator's own pause).
func appPaused(ph *jetstream.ConsumerInfo, c jetstream.ConsumerConfig) bool {
	if ph == nil || ph.Config.Metadata[planner.MetaRecreatePaused] != "true" || !pausedNow(c) || isHeld(c) {
		return false
	}
	op, err := time.Parse(time.RFC3339Nano, ph.Config.Metadata[planner.MetaRecreatePauseTill])
	return err != nil || !c.PauseUntil.Equal(op)
}

// placeholderConfig is the record of a recreate in progress. It never
// delivers (paused) and holds no messages apart from, on an interest
// stream, the lane's own from its position on.
func (x *executor) placeholderConfig(l *LaneChange, start uint64, operatorPause *time.Time) map[string]json.RawMessage {
	meta := map[string]string{
		planner.MetaRecreateLane:     l.Name,
		planner.MetaRecreateDesign:   x.d.Design,
		planner.MetaRecreateStartSeq: strconv.FormatUint(start, 10),
		planner.MetaRecreateChange:   immutableSummary(l.Changes),
	}
	if operatorPause != nil {
		meta[planner.MetaRecreatePauseTill] = operatorPause.Format(time.RFC3339Nano)
	} else if !isHeld(l.live.Config) {
		meta[planner.MetaRecreatePaused] = "true"
	}
	cfg := map[string]any{
		"durable_name":   placeholderName(l.Name),
		"description":    fmt.Sprintf("lanes apply: recreating lane %s at its position; deleted when done", l.Name),
		"ack_policy":     "explicit",
		"deliver_policy": "new",
		"replay_policy":  "instant",
		"filter_subject": l.want.FilterSubject + ".lanes-recreate",
		"pause_until":    heldUntil,
		"num_replicas":   l.want.Replicas,
		"metadata":       meta,
	}
	switch x.d.retention() {
	case "interest":
		cfg["deliver_policy"], cfg["opt_start_seq"] = "by_start_sequence", start
		cfg["filter_subject"] = l.want.FilterSubject
	case "workqueue":
		cfg["deliver_policy"] = "all"
	}
	return toMap(cfg)
}

// recreateBody is the designed lane starting at stream sequence start
// (deliver all on a workqueue stream, where acked messages are gone). It
// keeps the old lane's other tools' metadata, an operator's pause and a
// repartition hold; everything else comes from the design.
func (x *executor) recreateBody(l *LaneChange, operatorPause *time.Time, start uint64) map[string]json.RawMessage {
	body := toMap(l.want)
	if x.d.retention() != "workqueue" {
		body["deliver_policy"] = raw("by_start_sequence")
		body["opt_start_seq"] = raw(start)
	}
	var live map[string]string
	if l.live != nil {
		live = l.live.Config.Metadata
	}
	body["metadata"] = raw(mergeMetadata(live, l.want.Metadata))
	if operatorPause != nil {
		body["pause_until"] = raw(operatorPause)
	}
	if l.Held {
		hold(body) // a repartition's new lane stays held through its recreate
	}
	return body
}
