package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// An operator skips a lane's stuck head with lanes skip: the command
// writes a skip request for the lane into the membership bucket
// (membership.Skip, one per lane, create-only), and the instance serving
// the lane settles the message named there without running it:
//   - while its handler runs, the handler's context is cancelled with a
//     cause that wraps ErrSkipped, and the message is settled as the
//     request asks once the handler returns (unless it finished first:
//     then it is acked as usual, and the request says so);
//   - delivered later (a redelivery, a message waiting behind its key),
//     it is settled instead of run;
//   - out to nobody on a serial lane (a failure's redelivery awaited, or
//     not delivered yet), the lane's consumer is reset past it
//     (ResetPast): nothing else is out on a serial lane.
//
// The key's next message runs after it as after any settled message: a
// serial lane pulls only after the settle's confirmed answer, and a
// key-parallel lane starts a key's next message only on that answer. The
// outcome goes into the request, which the command waits for. A request
// the command settles itself (no instance served the lane) names the
// command as its actor: an instance then never runs the message, and
// hands it back with a delayed nak until the command has moved the lane
// past it.

// ErrSkipped is the cause a skipped message's handler context is
// cancelled with (context.Cause wraps it).
var ErrSkipped = errors.New("skipped by an operator (lanes skip)")

// skipCause is the cancel cause for a request.
func skipCause(e *membership.SkipEntry) error {
	s := fmt.Sprintf("%v: seq %d by %s", ErrSkipped, e.Seq, e.By)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return &skippedError{msg: s}
}

type skippedError struct{ msg string }

func (e *skippedError) Error() string { return e.msg }
func (e *skippedError) Unwrap() error { return ErrSkipped }

// skipBook is the design's skip requests as this instance's watch last
// saw them, by lane.
type skipBook struct {
	mu     sync.Mutex
	byLane map[string]*membership.SkipEntry
	kept   atomic.Int64 // requests in byLane: none (the usual case) costs a message nothing
}

func (b *skipBook) set(lane string, e *membership.SkipEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.kept.Store(int64(len(b.byLane))) }()
	if b.byLane == nil {
		b.byLane = map[string]*membership.SkipEntry{}
	}
	if e == nil {
		delete(b.byLane, lane)
		return
	}
	b.byLane[lane] = e
}

// pending is the lane's request if it still waits for its outcome.
func (b *skipBook) pending(lane string) *membership.SkipEntry {
	if b.kept.Load() == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.byLane[lane]; e != nil && e.Pending() {
		return e
	}
	return nil
}

// at is the lane's pending request naming seq.
func (b *skipBook) at(lane string, seq uint64) *membership.SkipEntry {
	if e := b.pending(lane); e != nil && e.Seq == seq {
		return e
	}
	return nil
}

// watchSkips follows the design's skip requests until the returned stop
// is called, the requests already there read first: a lane taken from now
// on knows of a pending request before its first message.
func (w *Worker) watchSkips() (stop func()) {
	prefix := w.scope + ".s."
	return w.watchRecords("the skip requests (lanes skip)", membership.SkipKeys(w.scope), func(e jetstream.KeyValueEntry) {
		lane := strings.TrimPrefix(e.Key(), prefix)
		se, _ := membership.ParseSkip(e)
		w.skips.set(lane, se)
		if se != nil && se.Pending() {
			w.skipAsked(lane, se)
		}
	})
}

// skipAsked tells the lane a request came: a serial lane's running
// handler is stopped at once, and the lane's goroutine does the rest.
func (w *Worker) skipAsked(name string, e *membership.SkipEntry) {
	w.mu.Lock()
	l := w.running[name]
	w.mu.Unlock()
	if l == nil {
		return
	}
	if f := l.cur.Load(); f != nil && f.seq == e.Seq && e.Actor == membership.SkipByWorker {
		l.w.log.Info("stopping the handler: the message is skipped", "lane", name, "seq", e.Seq, "by", e.By)
		f.cancel(skipCause(e))
	}
	l.poke(l.skipc)
}

// skipReason is what a skipped message's term or park says.
func skipReason(e *membership.SkipEntry) string {
	s := "skipped by " + e.By
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return planner.OneLine(s, 256)
}

// finishSkip writes the request's outcome (a compare-and-set: a request
// replaced meanwhile is left alone).
func (l *lane) finishSkip(e *membership.SkipEntry, result, detail string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	defer cancel()
	s := membership.Skips{KV: l.w.records().KV, Stream: l.w.cfg.Stream, Design: l.w.cfg.Design}
	rev, err := s.Finish(ctx, l.name, e, membership.SkipDone{Result: result, By: l.w.cfg.Instance, At: time.Now(), Detail: detail})
	if err != nil {
		l.w.log.Warn("cannot record the skip's outcome", "lane", l.name, "seq", e.Seq, "result", result, "error", err)
		return
	}
	done := *e
	done.Done = &membership.SkipDone{Result: result, By: l.w.cfg.Instance, At: time.Now().UTC(), Detail: detail}
	done.Rev = rev
	l.w.skips.set(l.name, &done) // not pending any more, before the watch says so
}

// skipDelivery settles a serial lane's delivery that a pending request
// names, instead of running it; false when no request names it. A
// delivery the lane already reset past is dropped.
func (l *lane) skipDelivery(p *puller, m *nats.Msg, msg *Msg) bool {
	if msg.Seq == l.resetPast {
		p.drain()
		l.ensure(p)
		return true // a delivery from before the reset: not out any more
	}
	e := l.w.skips.at(l.name, msg.Seq)
	if e == nil {
		return false
	}
	f := l.takeUnrun(p, m, msg)
	if f == nil {
		return true
	}
	if !l.settleSkip(p, f, msg, e) && p.sub != nil {
		l.resync(p)
	}
	return true
}

// settleSkip settles a message a pending request names (its handler was
// stopped, or never ran): terminated, or parked and acked. False when the
// ack was not confirmed (it comes again, and is skipped then).
func (l *lane) settleSkip(p *puller, f *inflight, msg *Msg, e *membership.SkipEntry) bool {
	w := l.w
	attrs := []any{"lane", l.name, "seq", msg.Seq, "key", msg.Key, "by", e.By}
	if e.Actor != membership.SkipByWorker {
		// lanes skip moves the lane past it itself: never run it meanwhile.
		if l.mayNak(f) {
			_ = f.m.Respond(fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(time.Second)))
		}
		w.log.Info("message being skipped by lanes skip: not run", attrs...)
		return true
	}
	reason := skipReason(e)
	result := membership.SkipTerminated
	body := []byte("+TERM " + reason)
	if e.Action == membership.SkipPark {
		if err := l.w.parkSkipped(e, f.m.Header, f.m.Data, msg, reason); err != nil {
			w.log.Error("cannot park the skipped message: it comes back and is skipped then", append(attrs, "dead_letter", e.DeadLetter, "error", err)...)
			if l.mayNak(f) {
				_ = f.m.Respond(fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(time.Second)))
			}
			return true
		}
		result, body = membership.SkipParked, []byte("+ACK")
	}
	if err := l.confirm(p, f.m, body); err != nil {
		l.stats.unconfirmed.Add(1)
		w.log.Error("skip not confirmed: the message comes back and is skipped then", append(attrs, "error", err)...)
		return false
	}
	if result == membership.SkipParked {
		l.stats.parked.Add(1)
	} else {
		l.stats.terminated.Add(1)
	}
	l.processed.Store(msg.Seq)
	w.log.Warn("message skipped", append(attrs, "result", result, "reason", e.Reason)...)
	l.finishSkip(e, result, "")
	return true
}

// skipRan records that the handler finished a message a pending request
// names before the skip reached it: it was acked as usual.
func (l *lane) skipRan(seq uint64) {
	if e := l.w.skips.at(l.name, seq); e != nil && e.Actor == membership.SkipByWorker {
		l.finishSkip(e, membership.SkipRan, "the handler finished it before the skip reached it: acked as usual")
	}
}

// skipIdle acts on a request while a serial lane has nothing in hand: the
// message is not delivered yet, or out and awaiting its redelivery. The
// lane's consumer is reset past it (ResetPast), which is safe since
// nothing else of the lane is out; a delivery of it from before the reset
// is dropped. A lane already past it says so.
func (l *lane) skipIdle(p *puller) {
	e := l.w.skips.pending(l.name)
	if e == nil || e.Actor != membership.SkipByWorker || l.standing() != membership.Held {
		return
	}
	info := l.info.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 2*l.w.cfg.Timeout)
	defer cancel()
	var park *Parking
	if e.Action == membership.SkipPark {
		park = &Parking{DeadLetter: e.DeadLetter, Reason: skipReason(e), Instance: l.w.cfg.Instance, Key: info.keyOf}
	}
	err := ResetPast(ctx, l.w.api, l.w.js, l.w.cfg.Stream, l.name, e.Seq, park)
	var moved *MovedPastError
	switch {
	case errors.As(err, &moved):
		l.finishSkip(e, membership.SkipPassed, moved.Error())
	case err != nil:
		l.w.log.Info("cannot reset the lane past the skipped message now: it is skipped when it is delivered", "lane", l.name, "seq", e.Seq, "error", err)
	default:
		l.resetPast = e.Seq
		result := membership.SkipTerminated
		if park != nil {
			result = membership.SkipParked
			l.stats.parked.Add(1)
		} else {
			l.stats.terminated.Add(1)
		}
		l.processed.Store(e.Seq)
		l.w.log.Warn("message skipped: the lane's consumer was reset past it", "lane", l.name, "seq", e.Seq, "by", e.By, "result", result)
		l.finishSkip(e, result, "no delivery in hand: the lane's consumer was reset past it")
		l.ask(p)
	}
}

// runOrSkip runs a key-parallel lane's message, unless a pending request
// names it: then it returns the skip's cause without running it.
func (l *lane) runOrSkip(ctx context.Context, msg *Msg) error {
	if e := l.w.skips.at(l.name, msg.Seq); e != nil {
		return skipCause(e)
	}
	return l.untilItRuns(ctx, msg)
}

// judgeSkip is judge for a message a pending request names: parked (then
// acked) or terminated; handed back with a delayed nak when the command
// settles it itself, or when it cannot be parked now.
func (l *lane) judgeSkip(h *held, m *nats.Msg, msg *Msg, e *membership.SkipEntry, herr error, took time.Duration) result {
	o := result{h: h, took: took, err: herr}
	if e.Actor != membership.SkipByWorker {
		o.kind, o.delay = doNak, time.Second
		return o
	}
	reason := skipReason(e)
	if e.Action == membership.SkipPark {
		if err := l.w.parkSkipped(e, m.Header, m.Data, msg, reason); err != nil {
			l.w.log.Error("cannot park the skipped message: it is tried again", "lane", l.name, "seq", msg.Seq, "dead_letter", e.DeadLetter, "error", err)
			o.kind, o.delay = doNak, time.Second
			return o
		}
		o.kind, o.park = doAck, reason
		return o
	}
	o.kind, o.err = doTerm, errors.New(reason)
	return o
}

// onSkip acts on a request in a key-parallel session: a running handler
// is stopped; a message in hand that may start is started, which skips
// it (runOrSkip); one awaiting its redelivery, or behind its key's
// earlier message, is skipped when its turn comes. A message the session
// does not hold while in sync, and that the server delivered, is settled
// already.
func (k *keyed) onSkip() {
	l := k.l
	e := l.w.skips.pending(l.name)
	if e == nil || e.Actor != membership.SkipByWorker {
		return
	}
	if h := k.bySeq[e.Seq]; h != nil {
		if h.running && h.cancel != nil {
			l.w.log.Info("stopping the handler: the message is skipped", "lane", l.name, "seq", e.Seq, "by", e.By)
			h.cancel(skipCause(e))
			return
		}
		k.dispatch(h.key)
		return
	}
	if !k.synced {
		return // looked at again once in sync (see sync)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	ci, err := l.w.api.ConsumerInfo(ctx, l.w.cfg.Stream, l.name)
	cancel()
	if err == nil && (ci.AckFloor.Stream >= e.Seq || ci.Delivered.Stream >= e.Seq) {
		l.finishSkip(e, membership.SkipPassed, fmt.Sprintf("the lane had settled seq %d already", e.Seq))
	}
}

// skipSettled records a skipped message's outcome once the server
// confirmed its settle (a key-parallel lane).
func (l *lane) skipSettled(h *held) {
	e := l.w.skips.at(l.name, h.seq)
	if e == nil || e.Actor != membership.SkipByWorker || h.settling == nil {
		return
	}
	switch {
	case h.settling.what == doTerm:
		l.finishSkip(e, membership.SkipTerminated, "")
	case h.settling.parked:
		l.finishSkip(e, membership.SkipParked, "")
	default:
		l.finishSkip(e, membership.SkipRan, "the handler finished it before the skip reached it: acked as usual")
	}
}

// parkSkipped publishes a skipped message's dead-letter copy.
func (w *Worker) parkSkipped(e *membership.SkipEntry, header nats.Header, data []byte, msg *Msg, reason string) error {
	subject := e.DeadLetter
	if subject == "" {
		subject = w.cfg.DeadLetter
	}
	if subject == "" {
		return errors.New("no dead-letter subject")
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, ParkedCopy(subject, header, data, msg, reason, reason, w.cfg.Instance))
	return err
}

// takeUnrun takes a serial lane's delivery that is settled without being
// run (a skipped message, a quarantined key's): the in-flight record to
// settle it with, or nil when the lane's epoch lapsed or the lane is being
// let go (the delivery is then dropped or handed back, as any other).
func (l *lane) takeUnrun(p *puller, m *nats.Msg, msg *Msg) *inflight {
	p.drain()
	f := &inflight{m: m, seq: msg.Seq, attempt: msg.Attempt, started: time.Now(), deadline: l.info.Load().deadline(msg.Attempt)}
	f.confirmed.Store(time.Now().UnixNano())
	switch {
	case l.standing() == membership.Lapsed:
		l.abandon(p)
		return nil
	case l.releasing() || l.w.abort.Err() != nil || l.standing() == membership.Left:
		l.finish(p, m)
		return nil
	}
	l.ensure(p)
	return f
}

// ParkedCopy is a message's dead-letter copy as lanes work parks it: its
// payload and headers (less the server's Nats-*), with the Lanes-Parked-*
// headers naming its origin, why (reason) and the error it failed with,
// and a message ID that makes the dead-letter stream store it once however
// often it is parked.
func ParkedCopy(deadLetter string, header nats.Header, data []byte, msg *Msg, reason, failure, instance string) *nats.Msg {
	pm := nats.NewMsg(deadLetter)
	pm.Data = data
	for k, v := range header {
		if !strings.HasPrefix(k, "Nats-") {
			pm.Header[k] = v
		}
	}
	pm.Header.Set(HeaderParkedStream, msg.Stream)
	pm.Header.Set(HeaderParkedSeq, strconv.FormatUint(msg.Seq, 10))
	pm.Header.Set(HeaderParkedSubject, msg.Subject)
	pm.Header.Set(HeaderParkedLane, msg.Lane)
	pm.Header.Set(HeaderParkedKey, msg.Key)
	pm.Header.Set(HeaderParkedAttempts, strconv.Itoa(msg.Attempt))
	pm.Header.Set(HeaderParkedReason, reason)
	pm.Header.Set(HeaderParkedError, planner.OneLine(failure, 1024))
	pm.Header.Set(HeaderParkedInstance, instance)
	pm.Header.Set(HeaderParkedAt, time.Now().UTC().Format(time.RFC3339Nano))
	pm.Header.Set(jetstream.MsgIDHeader, "lanes-parked:"+msg.Stream+":"+strconv.FormatUint(msg.Seq, 10))
	return pm
}

// Parking is how ResetPast parks the message first.
type Parking struct {
	DeadLetter string
	Reason     string
	Instance   string // who parks it (an instance, or "lanes skip")
	Key        func(subject string) string
	Attempts   int // delivery attempts so far, when known
}

// MovedPastError: the lane had settled the message already (its ack
// floor is at or past it).
type MovedPastError struct {
	Lane          string
	Seq, AckFloor uint64
}

func (e *MovedPastError) Error() string {
	return fmt.Sprintf("lane %s has moved past seq %d (its ack floor is seq %d)", e.Lane, e.Seq, e.AckFloor)
}

// NotHeadError: the message is not the lane's head (its oldest
// unacknowledged message), or messages after it were delivered.
type NotHeadError struct {
	Lane      string
	Seq, Head uint64
	Delivered uint64 // the last delivery, when past Seq
}

func (e *NotHeadError) Error() string {
	if e.Delivered > e.Seq {
		return fmt.Sprintf("lane %s has delivered messages after seq %d (up to seq %d): a reset past it would deliver them again", e.Lane, e.Seq, e.Delivered)
	}
	return fmt.Sprintf("seq %d is not the head of lane %s: its head is seq %d", e.Seq, e.Lane, e.Head)
}

// ResetPast settles a lane's head message seq without a delivery: it
// checks that seq is still the lane's first unacknowledged message (on
// its filter) and that nothing after it was delivered, parks a copy of the
// stored message first when park is set, and resets the lane's consumer
// to seq+1 (nats-server 2.14+, CONSUMER.RESET). Then nothing after seq is
// delivered again, and seq is never redelivered. The caller makes sure
// nobody holds a delivery of seq it could still run.
func ResetPast(ctx context.Context, api *jsapi.Client, js jetstream.JetStream, stream, lane string, seq uint64, park *Parking) error {
	ci, err := api.ConsumerInfo(ctx, stream, lane)
	if err != nil {
		return err
	}
	if err := checkHead(ctx, api, stream, lane, seq, ci); err != nil {
		return err
	}
	if park != nil {
		if err := parkStored(ctx, js, stream, lane, seq, park); err != nil {
			return err
		}
		// Checked again: the park took a moment.
		if ci, err = api.ConsumerInfo(ctx, stream, lane); err != nil {
			return err
		}
		if err := checkHead(ctx, api, stream, lane, seq, ci); err != nil {
			return err
		}
	}
	var answer struct {
		ResetSeq uint64 `json:"reset_seq"`
	}
	if err := api.Write(ctx, "CONSUMER.RESET."+stream+"."+lane, map[string]uint64{"seq": seq + 1}, &answer); err != nil {
		return fmt.Errorf("resetting lane %s past seq %d (nats-server 2.14+): %w", lane, seq, err)
	}
	return nil
}

// checkHead: seq is above the lane's ack floor, the first message on the
// lane's filter above it, and nothing after it was delivered.
func checkHead(ctx context.Context, api *jsapi.Client, stream, lane string, seq uint64, ci *jetstream.ConsumerInfo) error {
	if ci.AckFloor.Stream >= seq {
		return &MovedPastError{Lane: lane, Seq: seq, AckFloor: ci.AckFloor.Stream}
	}
	if ci.Delivered.Stream > seq {
		return &NotHeadError{Lane: lane, Seq: seq, Delivered: ci.Delivered.Stream}
	}
	filter := ci.Config.FilterSubject
	if filter == "" && len(ci.Config.FilterSubjects) == 1 {
		filter = ci.Config.FilterSubjects[0]
	}
	if filter == "" {
		filter = ">"
	}
	head, err := api.NextMsg(ctx, stream, ci.AckFloor.Stream+1, filter, false)
	if err != nil {
		return fmt.Errorf("reading the head of lane %s: %w", lane, err)
	}
	if head.Seq != seq {
		return &NotHeadError{Lane: lane, Seq: seq, Head: head.Seq}
	}
	return nil
}

// parkStored parks the stored message seq of a lane.
func parkStored(ctx context.Context, js jetstream.JetStream, stream, lane string, seq uint64, park *Parking) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	raw, err := s.GetMsg(ctx, seq)
	if err != nil {
		return fmt.Errorf("reading seq %d to park it: %w", seq, err)
	}
	msg := &Msg{Stream: stream, Lane: lane, Subject: raw.Subject, Seq: seq, Attempt: park.Attempts, Published: raw.Time}
	if park.Key != nil {
		msg.Key = park.Key(raw.Subject)
	}
	if _, err := js.PublishMsg(ctx, ParkedCopy(park.DeadLetter, raw.Header, raw.Data, msg, park.Reason, park.Reason, park.Instance)); err != nil {
		return fmt.Errorf("parking seq %d on %s: %w", seq, park.DeadLetter, err)
	}
	return nil
}
