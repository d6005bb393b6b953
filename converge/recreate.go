package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// recreate replaces a lane whose change the server forbids, keeping its
// position. The steps, each safe to interrupt:
//
//  1. pause the lane briefly (unless it is paused already), so the
//     position read next does not move under us;
//  2. read its ack floor: the new lane starts right after it;
//  3. record that position in a placeholder consumer (metadata
//     lanes.recreate.*, a filter that matches nothing of the lane's, or the
//     lane's own filter on an interest stream so its messages keep interest);
//  4. delete the lane, 5. create it as designed at the recorded position,
//  6. delete the placeholder.
//
// A re-run that finds a placeholder and no lane creates the lane from the
// record (finish); one that finds both with the lane as designed deletes
// the record.
func (x *executor) recreate(ctx context.Context, l *LaneChange) error {
	if !pausedNow(l.live.Config) {
		until := time.Now().Add(x.recreatePause())
		if err := x.a.write(ctx, "CONSUMER.PAUSE."+x.stream+"."+l.Name, map[string]any{"pause_until": until}, nil); err != nil {
			return fmt.Errorf("pausing before the recreate: %w", err)
		}
	}
	var info jetstream.ConsumerInfo
	if err := x.a.read(ctx, "CONSUMER.INFO."+x.stream+"."+l.Name, nil, &info); err != nil {
		return fmt.Errorf("reading its position: %w", err)
	}
	pos := positionOf(&info)
	ph := x.placeholderConfig(l, pos.StartSeq)
	if err := x.putConsumer(ctx, placeholderName(l.Name), ph, "", nil); err != nil {
		return fmt.Errorf("recording its position: %w", err)
	}
	if err := x.deleteConsumer(ctx, l.Name); err != nil {
		return err
	}
	body := recreateBody(l.live.Config, l.want, pos.StartSeq)
	if l.Held {
		hold(body) // a repartition's new lane stays held through its recreate
	}
	if err := x.createAt(ctx, l.Name, body); err != nil {
		return err
	}
	if err := x.deleteConsumer(ctx, placeholderName(l.Name)); err != nil {
		return err
	}
	x.count(func(r *Result) { r.Recreated = append(r.Recreated, Recreated{Lane: l.Name, Position: *pos}) })
	return nil
}

// finish completes a recreate that was interrupted after the lane was
// deleted: the placeholder says where the lane restarts.
func (x *executor) finish(ctx context.Context, l *LaneChange) error {
	meta := l.placeholder.Config.Metadata
	var live jetstream.ConsumerConfig
	if t, err := time.Parse(time.RFC3339Nano, meta[MetaRecreatePauseTill]); err == nil {
		live.PauseUntil = &t // an operator's pause survives the recreate
	}
	body := recreateBody(live, l.want, l.Position.StartSeq)
	if l.Held {
		hold(body)
	}
	if err := x.createAt(ctx, l.Name, body); err != nil {
		return err
	}
	if err := x.deleteConsumer(ctx, l.placeholder.Name); err != nil {
		return err
	}
	x.count(func(r *Result) { r.Recreated = append(r.Recreated, Recreated{Lane: l.Name, Position: *l.Position}) })
	return nil
}

// createAt creates a lane at a start sequence and checks that it really
// starts there. A create that races with the deletion of the consumer of
// the same name (a previous, interrupted apply's delete still running on
// the server) can pick up the deleted consumer's stale state from disk:
// the lane would then start elsewhere. A new lane has delivered nothing;
// if it has, it is deleted and created again.
func (x *executor) createAt(ctx context.Context, name string, body map[string]json.RawMessage) error {
	const attempts = 3
	for i := 1; ; i++ {
		var info jetstream.ConsumerInfo
		if err := x.putConsumer(ctx, name, body, "create", &info); err != nil {
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

// recreatePause outlasts the remaining steps of a recreate; if apply dies
// meanwhile the lane resumes by itself.
func (x *executor) recreatePause() time.Duration {
	return max(30*time.Second, 10*x.a.conn.Timeout)
}

func pausedNow(c jetstream.ConsumerConfig) bool {
	return c.PauseUntil != nil && c.PauseUntil.After(time.Now())
}

// placeholderConfig is the record of a recreate in progress. It never
// delivers (paused) and holds no messages apart from, on an interest
// stream, the lane's own from its position on: deleting the lane must not
// let the server discard them.
func (x *executor) placeholderConfig(l *LaneChange, start uint64) map[string]json.RawMessage {
	meta := map[string]string{
		MetaRecreateLane:     l.Name,
		MetaRecreateDesign:   x.d.Design,
		MetaRecreateStartSeq: strconv.FormatUint(start, 10),
	}
	if pausedNow(l.live.Config) && !isHeld(l.live.Config) {
		meta[MetaRecreatePauseTill] = l.live.Config.PauseUntil.Format(time.RFC3339Nano)
	}
	cfg := map[string]any{
		"durable_name":   placeholderName(l.Name),
		"description":    fmt.Sprintf("lanes apply: recreating lane %s at stream sequence %d; deleted when done", l.Name, start),
		"ack_policy":     "explicit",
		"deliver_policy": "new",
		"replay_policy":  "instant",
		"filter_subject": l.want.FilterSubject + ".lanes-recreate",
		"pause_until":    heldUntil,
		"num_replicas":   l.want.Replicas,
		"metadata":       meta,
	}
	if x.interestRetention() {
		cfg["deliver_policy"], cfg["opt_start_seq"] = "by_start_sequence", start
		cfg["filter_subject"] = l.want.FilterSubject
	}
	return toMap(cfg)
}

func (x *executor) interestRetention() bool {
	if s := x.d.live.Stream; s != nil {
		return s.Config.Retention == "interest"
	}
	return x.d.plan.Stream.Retention == "interest"
}

// recreateBody is the designed lane starting at stream sequence start.
// It keeps the old lane's pause (an operator's, or a repartition hold) and
// other tools' metadata; everything else comes from the design.
func recreateBody(live jetstream.ConsumerConfig, want planner.ConsumerConfig, start uint64) map[string]json.RawMessage {
	body := toMap(want)
	body["deliver_policy"] = raw("by_start_sequence")
	body["opt_start_seq"] = raw(start)
	body["metadata"] = raw(mergeMetadata(live.Metadata, want.Metadata))
	if live.PauseUntil != nil {
		body["pause_until"] = raw(live.PauseUntil)
	}
	return body
}
