package actions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// A quarantined key (lanes work --on-poison quarantine) is replayed, then
// lifted, in rounds, so that its messages keep their order even while new
// ones arrive for it (see work/quarantine.go for what workers do in each
// state of the record):
//  1. the record goes from quarantined to replaying, with a replay ID:
//     workers run copies carrying it (header Lanes-Replay-Id) and still
//     park every other message of the key;
//  2. the key's parked messages are replayed in the order they first had,
//     as copies carrying the ID, and the command waits until the key's
//     lane has settled the last copy: a message of the key published
//     meanwhile is then either parked (before a copy in the stream) or
//     not delivered yet;
//  3. while new parked messages of the key appeared, step 2 again;
//  4. the record goes to lifting: workers hold the key's other messages
//     (a delayed nak), neither run nor parked; parked messages listed
//     again: any there, back to replaying and step 2; none, the record is
//     deleted and the held messages run, in order, after every copy.
//
// Every step is written in the record first, so that a re-run after a
// kill continues where it was. A message parked by an instance that saw
// "lifting" only after it parked is out of order once the record is gone:
// it is reported plainly (a refusal naming it), never hidden.

// QuarantineLift is what a replay did (or would do) to a quarantined key.
type QuarantineLift struct {
	Key   string `json:"key"`
	Lane  string `json:"lane"`
	Since uint64 `json:"since_seq"` // the first failure
	// Rounds of replay; Replayed counts the parked messages replayed.
	Rounds   int    `json:"rounds"`
	Replayed int    `json:"replayed"`
	Result   string `json:"result"` // one of the Lift* results
	Detail   string `json:"detail,omitempty"`
	// OutOfOrder are parked messages of the key found after the lift:
	// they were parked as it was lifted, and run out of order if replayed.
	OutOfOrder []uint64 `json:"out_of_order,omitempty"`
}

// Results of a quarantined key's replay.
const (
	LiftWould   = "would replay, then lift"
	LiftDone    = "lifted"
	LiftGone    = "not quarantined any more"
	LiftFailed  = "failed again: still quarantined"
	LiftLateOut = "lifted; messages parked during the lift"
)

// liftRounds bounds the rounds of one replay: a key that keeps getting
// messages faster than they replay is left replaying (a re-run goes on).
const liftRounds = 50

// liftWait bounds the wait for the key's lane to settle a round's copies;
// afterLiftWait the wait, once lifted, for what was delivered then.
const (
	liftWait      = 2 * time.Minute
	afterLiftWait = 5 * time.Second
)

// quarantinesOf reads the design's quarantine records that the replay
// covers: those of the keys named (--key), of the chosen messages' keys,
// or all of them with --all.
func quarantinesOf(sel *Selection, f ParkedFilter, p *Parked) []membership.Quarantine {
	w := sel.Report.WorkersOf(p.Design)
	if w == nil {
		return nil
	}
	keys := keysOf(sel, f.Keys)
	var out []membership.Quarantine
	for _, q := range w.Quarantined {
		covered := f.All || keys[q.Key] || slices.ContainsFunc(p.Messages, func(m ParkedMsg) bool { return m.Key == q.Key })
		if covered {
			out = append(out, q)
		}
	}
	return out
}

// quarantinedOnly: m was parked by its key's quarantine (or after its first
// failure): it belongs to the quarantine's replay, not the ordinary one.
func quarantinedOnly(m ParkedMsg, qs []membership.Quarantine) bool {
	for _, q := range qs {
		if q.Key == m.Key && m.First() >= q.Seq {
			return true
		}
	}
	return false
}

// lifter replays one quarantined key and lifts its quarantine.
type lifter struct {
	c    *connect.Conn
	api  *jsapi.Client
	sel  *Selection
	f    ParkedFilter
	info *jetstream.StreamInfo
	qs   membership.Quarantines
	key  string
	// subject is where the key is published (from its parked messages),
	// to find its lanes; "" until a round ran: the key is tried as is.
	subject string
	lift    QuarantineLift
	out     *ParkedOutcome
}

func newLifter(ctx context.Context, c *connect.Conn, sel *Selection, f ParkedFilter, info *jetstream.StreamInfo, q membership.Quarantine, out *ParkedOutcome) (*lifter, error) {
	kv, err := c.JS.KeyValue(ctx, membership.Bucket)
	if err != nil {
		return nil, fmt.Errorf("membership bucket %s: %w", membership.Bucket, err)
	}
	return &lifter{c: c, api: jsapi.New(c), sel: sel, f: f, info: info, key: q.Key, out: out,
		qs:   membership.Quarantines{KV: kv, Scope: membership.Scope(out.Stream, out.Design)},
		lift: QuarantineLift{Key: q.Key, Lane: q.Lane, Since: q.Seq}}, nil
}

// parked lists the key's parked messages that the quarantine covers, in
// the order they first had.
func (l *lifter) parked(ctx context.Context, since uint64) ([]ParkedMsg, error) {
	p, err := ReadParked(ctx, l.c, l.sel, ParkedFilter{DeadLetter: l.f.DeadLetter})
	if err != nil {
		return nil, err
	}
	var out []ParkedMsg
	for _, m := range p.all {
		if m.Key == l.key && m.First() >= since {
			out = append(out, m)
		}
	}
	byOrigin(out)
	return out, nil
}

// dryRun says what a replay would do.
func (l *lifter) dryRun(ctx context.Context) error {
	rec, err := l.qs.Get(ctx, l.key)
	if err != nil || rec == nil {
		l.lift.Result = LiftGone
		return err
	}
	msgs, err := l.parked(ctx, rec.Seq)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		l.out.add(ParkedChange{ParkedMsg: m, Changed: true, Done: "would replay (quarantined key), in order"})
	}
	l.lift.Result, l.lift.Replayed = LiftWould, len(msgs)
	l.out.Changed++ // lifting the quarantine is a change of its own
	return nil
}

// run replays the key in rounds and lifts its quarantine (see above).
func (l *lifter) run(ctx context.Context) error {
	by := "lanes parked replay"
	if h, err := os.Hostname(); err == nil {
		by += " on " + h
	}
	for turn := 0; turn < 2*liftRounds+10; turn++ {
		rec, err := l.qs.Get(ctx, l.key)
		if err != nil {
			return err
		}
		if rec == nil {
			if l.lift.Result == "" {
				l.lift.Result = LiftGone
			}
			return nil
		}
		if rec.State == membership.QuarantineOn && l.lift.Rounds > 0 {
			// A replayed copy failed again: the instance set it back.
			l.lift.Result, l.lift.Detail = LiftFailed, rec.Error
			return refusedf("key %s failed again during its replay (%s): it stays quarantined; its messages are parked in order; fix the handler and replay again", planner.Quote(l.key, 100), planner.OneLine(rec.Error, 300))
		}
		if rec.State == membership.QuarantineOn {
			next := rec.Quarantine
			next.State, next.ReplayID, next.ReplayBy = membership.QuarantineReplaying, newReplayID(), by
			if _, err := l.qs.Update(ctx, next, rec.Rev); err != nil && !errors.Is(err, membership.ErrQuarantineChanged) {
				return err
			}
			continue // read again: ours, or another operator's
		}
		msgs, err := l.parked(ctx, rec.Seq)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Get(work.HeaderReplayID) == rec.ReplayID && strings.HasPrefix(m.Reason, "quarantined: failed") {
				l.lift.Result, l.lift.Detail = LiftFailed, m.Error
				return refusedf("key %s: its replayed message (parked as %d, first sequence %d) failed again: it stays quarantined; fix the handler and replay again", planner.Quote(l.key, 100), m.Seq, m.First())
			}
		}
		if len(msgs) > 0 {
			if rec.State == membership.QuarantineLifting {
				back := rec.Quarantine
				back.State = membership.QuarantineReplaying
				if _, err := l.qs.Update(ctx, back, rec.Rev); err != nil && !errors.Is(err, membership.ErrQuarantineChanged) {
					return err
				}
				continue
			}
			if l.lift.Rounds >= liftRounds {
				return fmt.Errorf("key %s: still new parked messages after %d rounds of replay: it stays replaying (workers park its new messages); run the replay again to go on", planner.Quote(l.key, 100), l.lift.Rounds)
			}
			if err := l.round(ctx, msgs, rec.ReplayID); err != nil {
				return err
			}
			continue
		}
		if rec.State == membership.QuarantineReplaying {
			next := rec.Quarantine
			next.State = membership.QuarantineLifting
			if _, err := l.qs.Update(ctx, next, rec.Rev); err != nil && !errors.Is(err, membership.ErrQuarantineChanged) {
				return err
			}
			continue // lifting: list again, then lift
		}
		// Lifting, and nothing parked since: lift.
		if err := l.qs.Lift(ctx, l.key, rec.Rev); err != nil {
			if errors.Is(err, membership.ErrQuarantineChanged) {
				continue
			}
			return err
		}
		l.lift.Result = LiftDone
		return l.afterLift(ctx, rec.Seq)
	}
	return fmt.Errorf("key %s: its quarantine record kept changing (another operator replaying it?): run the replay again", planner.Quote(l.key, 100))
}

// round replays the key's parked messages as copies carrying the replay's
// ID, then waits until the key's lane has settled the last copy.
func (l *lifter) round(ctx context.Context, msgs []ParkedMsg, id string) error {
	l.lift.Rounds++
	keys, err := planReplay(ctx, l.api, l.sel, &Parked{Stream: l.out.Stream, Design: l.out.Design, Messages: msgs}, l.info)
	if err != nil {
		return err
	}
	var last uint64
	var subject string
	for _, k := range keys {
		k.order = nil // the quarantine parked the key's later messages: its order holds
		k.replayID = id
		for _, m := range k.msgs {
			ch := ParkedChange{ParkedMsg: m, Changed: true}
			if err := replayOne(ctx, l.c, l.api, k, &ch); err != nil {
				return err
			}
			ch.Done += fmt.Sprintf(" (quarantined key, round %d)", l.lift.Rounds)
			l.out.add(ch)
			l.lift.Replayed++
			last, subject = max(last, ch.NewSeq), k.subject
			l.subject = k.subject
		}
	}
	return l.settled(ctx, subject, last)
}

// settled waits until the lanes that store seq have settled it (their ack
// floor is at or past it).
func (l *lifter) settled(ctx context.Context, subject string, seq uint64) error {
	if seq == 0 {
		return nil
	}
	stored, err := getMsg(ctx, l.api, l.out.Stream, seq, "")
	if err != nil {
		return fmt.Errorf("reading the replayed copy %d: %w", seq, err)
	}
	places, err := l.sel.Report.Locate(subject)
	if err != nil {
		return err
	}
	var lanes []string
	for _, p := range places {
		if p.Stored == stored.Subject {
			lanes = append(lanes, p.Lanes...)
		}
	}
	for _, lane := range lanes {
		if err := l.waitFloor(ctx, lane, seq, liftWait); err != nil {
			return fmt.Errorf("key %s: lane %s has not settled the replayed copy %d within %s (is a lanes work instance serving it? does another key hold a key-parallel lane's ack floor?): the key stays replaying; run the replay again to go on", planner.Quote(l.key, 100), lane, seq, liftWait)
		}
	}
	return nil
}

// afterLift lists the key's parked messages once more, once the lane has
// settled what was delivered when the record went: one parked by an
// instance that decided just before it saw "lifting" runs out of order if
// replayed now, and is reported.
func (l *lifter) afterLift(ctx context.Context, since uint64) error {
	where := l.subject
	if where == "" {
		where = l.key
	}
	if places, err := l.sel.Report.Locate(where); err == nil {
		for _, p := range places {
			for _, lane := range p.Lanes {
				if ci, err := l.api.ConsumerInfo(ctx, l.out.Stream, lane); err == nil && ci.Delivered.Stream > 0 {
					_ = l.waitFloor(ctx, lane, ci.Delivered.Stream, afterLiftWait) // at most: then list anyway
				}
			}
		}
	}
	msgs, err := l.parked(ctx, since)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	l.lift.Result = LiftLateOut
	var seqs []string
	for _, m := range msgs {
		l.lift.OutOfOrder = append(l.lift.OutOfOrder, m.Seq)
		seqs = append(seqs, fmt.Sprint(m.Seq))
	}
	return refusedf("key %s: its quarantine is lifted, but %d message(s) were parked as it was lifted (parked %s): the key's later messages may have run before them; replay them with --out-of-order --seq %s, or discard them", planner.Quote(l.key, 100), len(msgs), strings.Join(seqs, ","), strings.Join(seqs, ","))
}

// waitFloor waits (at most limit) until lane's ack floor reaches seq.
func (l *lifter) waitFloor(ctx context.Context, lane string, seq uint64, limit time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		ci, err := l.api.ConsumerInfo(wctx, l.out.Stream, lane)
		if err == nil && ci.AckFloor.Stream >= seq {
			return nil
		}
		select {
		case <-wctx.Done():
			return wctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func newReplayID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
