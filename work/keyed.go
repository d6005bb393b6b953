package work

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// A key-parallel lane (keys in flight K above 1) has up to K messages out
// at once (the server holds it to its max ack pending, K) and runs at most
// one message per key: a key's next message starts only once the one
// before it is settled (acked with the server's answer, terminated or
// parked). Messages of a busy key wait in that key's queue, in stream
// order, kept alive by in-progress acks; a failing key holds only its own
// messages.
//
// The server no longer makes two would-be owners take turns, as max ack
// pending 1 does on a serial lane, and a new owner could receive a key's
// later message before its earlier one, still out with the old owner,
// comes back. Ownership rests on what the server says:
//   - the lane's record, taken with compare-and-set, says who may serve it;
//   - the lane is pinned (a pinned-client priority group): while this
//     instance holds the pin, the server delivers to its pull requests
//     only; a pin taken by another client begins the session again;
//   - a session runs nothing until it is in sync: the server's count of
//     the lane's messages out equals what the session holds, and the
//     server's last delivery is one the session received. Then every
//     message out is in its hands (what went elsewhere came back to it
//     once its ack deadline passed), and the per-key order it keeps is the
//     stream's.
//
// A take-over after a death or a cut-off so waits for the ack wait, as on
// a serial lane; a hand-over does not, since the old owner gives back
// (nak) what it held and did not run. The consumer reset API would not
// wait, but it delivers again everything above the ack floor, acked or
// not: on a key-parallel lane that runs a key's earlier message again
// after its later one.

// held is a message of the lane delivered to this instance and not yet
// settled.
type held struct {
	key     string
	seq     uint64
	m       *nats.Msg // its last delivery; nil while a failure's redelivery is awaited
	msg     *Msg
	got     time.Time // when it was delivered (or redelivered)
	heard   time.Time // the server's last answer about it
	lastWPI time.Time // the last in-progress ack sent
	running bool
	started time.Time // when its handler started, while it runs
	cancel  context.CancelCauseFunc
	// settling: an ack or term was sent; the key waits for the answer.
	settling *settling
	// answered: the answer to the ack its handler's goroutine sent came
	// before the lane took in the handler's result.
	answered bool
}

// settling is an ack or term sent for a held message, awaiting the
// server's answer.
type settling struct {
	body   []byte
	reply  string // where the answer comes
	sent   time.Time
	tries  int
	what   outcomeKind
	parked bool
}

// keyQueue is one key's messages out, by stream sequence.
type keyQueue struct{ open []*held }

// insert adds h in stream order (a redelivery can come after a later
// message of its key).
func (q *keyQueue) insert(h *held) {
	i, _ := slices.BinarySearchFunc(q.open, h.seq, func(a *held, seq uint64) int { return cmp.Compare(a.seq, seq) })
	q.open = slices.Insert(q.open, i, h)
}

// outcomeKind is what a handler's result asks of the lane.
type outcomeKind int

const (
	doAck      outcomeKind = iota // success, or parked: ack
	doTerm                        // terminated by the handler
	doNak                         // failed: redelivered after a delay
	doGiveUp                      // lost contact, or the lane lapsed: the ack wait redelivers it
	doHandBack                    // stopping at once, or the handler could not run: nak
)

// result is a handler's run, as its goroutine reports it to the lane.
type result struct {
	h     *held
	kind  outcomeKind
	delay time.Duration // doNak: the delay to send
	took  time.Duration
	err   error
	park  string    // the park reason, when the message was parked
	sent  time.Time // doAck: when the handler's goroutine sent the ack
}

// keyed is a key-parallel lane's state while this instance serves it,
// touched by the lane's goroutine only (handlers report on results).
type keyed struct {
	l       *lane
	p       *puller
	keys    map[string]*keyQueue
	bySeq   map[uint64]*held
	running int
	results chan result
	acks    map[string]*held // answer subject -> message being settled
	// wpiPrefix and ackPrefix start the subjects the answers to
	// in-progress acks and to acks (or terms) come on: <inbox>.aw<seq>,
	// <inbox>.as<seq>.
	wpiPrefix, ackPrefix string
	// synced: the server's messages out are all held here (see sync);
	// until then nothing runs.
	synced   bool
	syncBase uint64      // the server's delivery sequence when the session began
	lastDseq uint64      // the last delivery sequence seen in this session
	syncT    *time.Timer // the next sync check, while out of sync
	syncWait time.Duration
	retryAt  time.Time // a refused or busy pull asks again then
	pin      string    // the pin the session's deliveries carry
	unpinAt  time.Time // no delivery under a pin by then: unpin again (see pinPatience)
	unpins   int
	draining bool        // released: run what is held, pull nothing more
	spare    []*nats.Msg // delivered while draining, given back at the end
}

// A key-parallel lane asks for one window of messages at a time (a new
// request once the window came). A standing request for thousands was
// faster on a no-op drain (3.6x a serial lane against 3.0x), but after a
// switch from serial lanes nats-server left such a lane's pinned request
// waiting with messages pending and none delivered, for 30 to 120 s
// (TestVersionCheckThroughChaos, about one run in two). One window at a
// time showed it far more rarely, only under heavy load; its cause is not
// found yet (docs/performance.md).

// errRestart ends a session of a key-parallel lane that must begin again:
// a lost ack answer, the pin taken.
var errRestart = errors.New("restart")

// serveKeyed serves a key-parallel lane while it is held; it has the
// contract of serve. A session begins again after a pin lost or an ack the
// server did not confirm. A lane whose keys in flight went down to 1 (or
// that was key-parallel under its last owner) is served so until nothing
// is out, then serially.
func (l *lane) serveKeyed() bool {
	for {
		ok, err := l.keyedSession()
		if !errors.Is(err, errRestart) {
			return ok
		}
		l.stats.resyncs.Add(1)
		l.w.log.Info("lane session begins again: it runs nothing until every message out is in its hands", "lane", l.name, "why", err.Error())
	}
}

// keyedSession is one session of a key-parallel lane: pull, sync, run.
func (l *lane) keyedSession() (bool, error) {
	w := l.w
	info := l.info.Load()
	k := &keyed{l: l, keys: map[string]*keyQueue{}, bySeq: map[uint64]*held{},
		results: make(chan result, max(info.maxAckPending, 1)), acks: map[string]*held{}}
	if info.group != "" {
		// Whoever held the pin (an instance that died, or the one handing
		// the lane over) loses it now.
		w.unpin(l.name, info.group)
	}
	select {
	case <-l.resyncs: // this session begins in sync with the server anyway
	default:
	}
	if base, ok := l.deliveredNow(); ok {
		k.syncBase = base
	}
	l.recordWindow(k.window(), true) // a successor knows the lane was served so
	window := max(info.maxAckPending, 1)
	p, err := newPuller(w.nc, w.apiPrefix, w.cfg.Stream, l.name, info.group, w.pullPace, window)
	if err != nil {
		w.log.Error("cannot subscribe for lane", "lane", l.name, "error", err)
		return true, nil
	}
	k.p, k.wpiPrefix, k.ackPrefix = p, p.ackPrefix+"w", p.ackPrefix+"s"
	every := k.every()
	tick := time.NewTicker(every)
	defer tick.Stop()
	k.syncT = time.NewTimer(0) // the first check at once
	defer k.syncT.Stop()
	l.ask(p)
	k.unpinAt = time.Now().Add(pinPatience(0))
	end := func(ok bool, err error) (bool, error) {
		k.stop(ok)
		return ok, err
	}
	for {
		if e, ok := p.next(); ok {
			if err := k.on(e); err != nil {
				return end(l.standing() != membership.Lapsed, err)
			}
			continue
		}
		if k.draining && k.idle() {
			return end(true, nil)
		}
		if d := k.every(); d != every {
			every = d
			tick.Reset(d)
		}
		if k.synced && len(k.bySeq) == 0 && l.info.Load().keys == 1 {
			l.switchedNow = true // nothing out: serve it serially from here
			return end(true, nil)
		}
		select {
		case <-l.release:
			if !k.draining {
				k.drain()
			}
		case <-l.switching:
			l.switchedNow = true
			if !k.draining {
				k.drain()
			}
		case <-w.abort.Done():
			k.cancelAll(context.Canceled)
			return end(true, nil)
		case <-l.lapsed:
			return end(false, nil)
		case <-l.lost:
			return end(false, nil)
		case m := <-p.ch:
			if m == nil {
				p.nudge.woke() // only the serial loop is nudged (lane.inbox); this loop waits on every signal anyway
				continue
			}
			if err := k.on(event{m, p.note(m)}); err != nil {
				return end(l.standing() != membership.Lapsed, err)
			}
		case r := <-k.results:
			if err := k.done(r); err != nil {
				return end(true, err)
			}
		case <-tick.C:
			if err := k.tick(); err != nil {
				return end(true, err)
			}
		case <-k.syncT.C:
			if !k.synced && !k.draining {
				k.sync()
			}
		case <-l.skipc:
			k.onSkip()
		case <-l.repull:
			if !k.draining {
				l.ask(p)
			}
		case <-l.resyncs:
			if !k.draining {
				return end(true, fmt.Errorf("%w: a reconnect or a new leader, and deliveries on their way may have been lost", errRestart))
			}
		}
	}
}

// deliveredNow reads the server's last delivery sequence of the lane.
func (l *lane) deliveredNow() (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	defer cancel()
	ci, err := l.w.api.ConsumerInfo(ctx, l.w.cfg.Stream, l.name)
	if err != nil {
		return 0, false
	}
	return ci.Delivered.Consumer, true
}

// every is how often the session looks after what it holds: in-progress
// acks, unanswered acks, the sync, the window record. A session at rest
// (in sync, nothing held, its pin checks done) only looks after its pull
// request, as often as the request's heartbeat.
func (k *keyed) every() time.Duration {
	info := k.l.info.Load()
	busy := min(max(info.deadline(1)/10, 20*time.Millisecond), time.Second)
	atRest := k.synced && !k.draining && len(k.bySeq) == 0 && len(k.acks) == 0 && k.retryAt.IsZero() &&
		(info.group == "" || k.pin != "" || k.unpins >= idlePinChecks)
	if atRest {
		return max(busy, k.p.checkEvery())
	}
	return busy
}

func (k *keyed) idle() bool {
	return len(k.bySeq) == 0 || k.running == 0 && !k.settlingAny() && !k.runnable()
}

func (k *keyed) settlingAny() bool { return len(k.acks) > 0 }

// runnable: some key's first message is in hand and could start.
func (k *keyed) runnable() bool {
	if !k.synced {
		return false
	}
	for _, q := range k.keys {
		if h := q.open[0]; h.m != nil && !h.running && h.settling == nil {
			return true
		}
	}
	return false
}

// on acts on one inbox event.
func (k *keyed) on(e event) error {
	l, w := k.l, k.l.w
	switch e.ev {
	case evMessage:
		if l.standing() == membership.Lapsed {
			return nil // another instance may hold the lane: dropped unrun
		}
		if k.draining {
			if _, held := k.bySeq[seqOf(e.m)]; !held {
				// Given back once the inbox is gone (see stop): a nak now
				// would bring it straight back to the request still
				// waiting at the server, again and again.
				k.spare = append(k.spare, e.m)
				return nil
			}
		}
		if err := k.pinned(e.m); err != nil {
			return err
		}
		k.deliver(e.m)
		if !k.p.outstanding && !k.draining {
			l.ask(k.p) // its batch came: the next request waits at the server
		}
	case evAckAnswer:
		k.answered(e.m.Subject)
	case evEnded:
		if !k.draining {
			l.ask(k.p)
		}
	case evPinLost:
		// Another client holds the pin: whatever it got is out of this
		// instance's sight, so the session begins again (rewound).
		return fmt.Errorf("%w: the lane's pin went to another client", errRestart)
	case evGone:
		w.log.Debug("lane deleted", "lane", l.name)
		l.deleted = true
		w.laneDeleted(l.name)
		k.drain()
		return errLaneGone
	case evBusy, evRefused:
		if e.ev == evRefused {
			w.log.Warn("pull refused by the server: "+refusal(e.m), "lane", l.name)
			w.relistSoon()
		}
		k.retryAt = time.Now().Add(time.Second)
	}
	return nil
}

var errLaneGone = errors.New("lane deleted")

// seqOf is a delivery's stream sequence (0 if it has none).
func seqOf(m *nats.Msg) uint64 {
	d, _ := parseDelivery(m.Reply)
	return d.seq
}

// pinned checks a delivery's pin: the session's deliveries all carry one
// pin. A session in sync before its first delivery (an idle lane) checks
// its sync again under the pin it gets; a pin that changes means another
// client held it meanwhile, and the session begins again.
func (k *keyed) pinned(m *nats.Msg) error {
	if k.l.info.Load().group == "" {
		return nil
	}
	pin := m.Header.Get("Nats-Pin-Id")
	switch {
	case k.pin == "":
		k.pin = pin
		if k.synced {
			k.synced, k.syncWait = false, 0
			k.syncT.Reset(0)
		}
	case pin != k.pin:
		return fmt.Errorf("%w: the lane's pin changed", errRestart)
	}
	return nil
}

// pinPatience is how long a session out of sync waits for its first
// delivery under a pin before it unpins the lane again (the n-th time).
//
// nats-server (2.11 to 2.15.2) gives a free pin to the first waiting
// request without a pin id before it checks that anyone still listens
// for it (TestServerPinsAGoneRequest). A request left behind by an
// earlier session or owner, whose inbox is gone, can so take the pin that
// the session's unpin freed; the session's own request, sent after the
// unpin, is then skipped until the pinned TTL ends. Unpinned again while
// the session's request waits, the server walks past the gone request
// and pins the live one. Beginning the session again would not help: its
// request, left behind, would take the next pin.
func pinPatience(n int) time.Duration {
	return min(time.Second<<min(n, 3), 8*time.Second)
}

// idlePinChecks is how often a session in sync that had no delivery yet
// checks that no one else holds the lane's pin (at 1, 3, 7 and 15 s): a
// request left behind can only take it before this session's request is
// at the server, so the first seconds tell.
const idlePinChecks = 4

// pinTakenElsewhere: the server says a client holds the lane's pin while
// this session, which unpinned it at its start, got no delivery.
func (k *keyed) pinTakenElsewhere() bool {
	l := k.l
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	defer cancel()
	ci, err := l.w.api.ConsumerInfo(ctx, l.w.cfg.Stream, l.name)
	if err != nil {
		return false
	}
	for _, g := range ci.PriorityGroups {
		if g.PinnedClientID != "" {
			return true
		}
	}
	return false
}

// deliver takes in one delivery: a new message joins its key's queue, a
// redelivery replaces the delivery held for it.
func (k *keyed) deliver(m *nats.Msg) {
	l := k.l
	d, ok := parseDelivery(m.Reply)
	if !ok {
		l.w.log.Warn("not a JetStream delivery", "lane", l.name, "subject", m.Subject, "reply", m.Reply)
		return
	}
	// The last delivery, not the highest: a lane's deliveries come in
	// order, and after a reset (CONSUMER.RESET: lanes rewind, lanes skip)
	// its delivery sequence begins again at 1.
	k.lastDseq = d.dseq
	now := time.Now()
	if h, ok := k.bySeq[d.seq]; ok {
		h.m, h.got, h.heard = m, now, now
		h.msg = l.message(m, d)
		if h.running || h.settling != nil {
			return
		}
		k.dispatch(h.key)
		return
	}
	msg := l.message(m, d)
	h := &held{key: msg.Key, seq: msg.Seq, m: m, msg: msg, got: now, heard: now}
	k.bySeq[h.seq] = h
	q := k.keys[h.key]
	if q == nil {
		q = &keyQueue{}
		k.keys[h.key] = q
	}
	q.insert(h)
	k.dispatch(h.key)
}

// dispatch starts the key's first message if it is in hand and nothing of
// the key runs or is being settled, once the session is in sync.
func (k *keyed) dispatch(key string) {
	l := k.l
	q := k.keys[key]
	if q == nil || !k.synced || l.standing() != membership.Held || l.w.abort.Err() != nil {
		return
	}
	h := q.open[0]
	if h.m == nil || h.running || h.settling != nil {
		return
	}
	k.start(h)
}

// start runs h's handler in a goroutine of its own.
func (k *keyed) start(h *held) {
	l := k.l
	info := l.info.Load()
	ctx, cancel := context.WithCancelCause(l.w.abort)
	h.running, h.cancel, h.started = true, cancel, time.Now()
	k.running++
	if k.running == 1 {
		l.stats.begin(time.Now())
	}
	m, msg := h.m, h.msg
	reply := k.ackReply(h.seq)
	go func() {
		defer cancel(nil)
		start := time.Now()
		err := l.runKeyed(ctx, msg)
		o := l.judge(h, m, msg, info, err, time.Since(start))
		if o.kind == doAck && l.standing() != membership.Lapsed {
			// Acked from here, not by the lane's goroutine: the slot the
			// ack frees at the server is what the lane's other keys wait
			// for. The key's next message still waits for the answer.
			o.sent = time.Now()
			if err := l.w.nc.PublishRequest(m.Reply, reply, ackBody); err != nil {
				o.sent = time.Time{} // the lane sends it again
			}
		}
		k.results <- o
	}()
}

var ackBody = []byte("+ACK")

// ackReply is where the answer to the ack of the message at seq comes.
func (k *keyed) ackReply(seq uint64) string { return k.ackPrefix + strconv.FormatUint(seq, 10) }

// judge decides what a handler's result asks of the lane (it parks the
// message first when it must be parked); it runs on the handler's
// goroutine.
func (l *lane) judge(h *held, m *nats.Msg, msg *Msg, info *laneInfo, herr error, took time.Duration) result {
	w := l.w
	o := result{h: h, took: took, err: herr}
	if e := w.skips.at(l.name, msg.Seq); e != nil && herr != nil && !errors.Is(herr, errLostContact) {
		return l.judgeSkip(h, m, msg, e, herr, took) // stopped or never run for a skip
	}
	if q, ok := errors.AsType[*quarantinedError](herr); ok {
		return l.judgeQuarantined(h, m, msg, q, took) // its key is quarantined: never run
	}
	switch {
	case herr == nil:
		o.kind = doAck
		return o
	case errors.Is(herr, errLostContact):
		o.kind = doGiveUp
		return o
	case w.abort.Err() != nil && errors.Is(herr, context.Canceled), isOutage(herr):
		o.kind = doHandBack
		return o
	}
	kind, want := classify(herr)
	park := w.cfg.DeadLetter != "" && (kind == outcomeTerm || w.parksPoison(msg) && msg.Attempt >= w.cfg.ParkAfter)
	switch {
	case park:
		o.park = "terminated by the handler"
		if kind != outcomeTerm {
			var qerr error
			if o.park, qerr = w.poisonReason(msg, herr); qerr != nil {
				w.log.Error("cannot record the key's quarantine: the message will be retried", "lane", l.name, "seq", msg.Seq, "key", msg.Key, "error", qerr)
				o.park = ""
				o.kind, o.delay = doNak, nakOf(info, msg.Attempt, -1)
				return o
			}
		}
		if err := w.park(m, msg, o.park, herr); err != nil {
			w.log.Error("cannot park the message: it will be retried", "lane", l.name, "seq", msg.Seq, "key", msg.Key, "dead_letter", w.cfg.DeadLetter, "error", err)
			o.park = ""
			o.kind, o.delay = doNak, nakOf(info, msg.Attempt, -1)
			return o
		}
		o.kind = doAck
	case kind == outcomeTerm:
		o.kind = doTerm
	default:
		o.kind, o.delay = doNak, nakOf(info, msg.Attempt, want)
	}
	return o
}

func nakOf(info *laneInfo, attempt int, want time.Duration) time.Duration {
	send, _ := info.nakDelay(attempt, want)
	return send
}

// done acts on a handler's result.
func (k *keyed) done(o result) error {
	l, w := k.l, k.l.w
	h := o.h
	h.running, h.cancel = false, nil
	k.running--
	if k.running == 0 {
		l.stats.end()
	}
	l.stats.done(o.took)
	attrs := []any{"lane", l.name, "seq", h.seq, "key", h.key, "attempt", h.msg.Attempt}
	if o.kind != doAck {
		l.stats.failed.Add(1)
	}
	switch o.kind {
	case doAck:
		if o.park != "" {
			w.log.Warn("message parked", append(attrs, "dead_letter", w.cfg.DeadLetter, "reason", o.park, "error", o.err)...)
		}
		k.settle(h, ackBody, o)
	case doTerm:
		w.log.Warn("message terminated by the handler", append(attrs, "error", o.err)...)
		k.settle(h, []byte("+TERM "+planner.OneLine(o.err.Error(), 256)), o)
	case doNak:
		if l.standing() != membership.Lapsed && h.m != nil {
			body := []byte("-NAK")
			if o.delay > 0 {
				body = fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(o.delay))
			}
			_ = h.m.Respond(body)
		}
		w.log.Warn("handler failed", append(attrs, "error", o.err, "retry_in", o.delay.String())...)
		h.m = nil // its key waits for the redelivery
	case doGiveUp:
		w.log.Warn("handler stopped", append(attrs, "error", o.err)...)
		h.m = nil
	case doHandBack:
		if l.standing() == membership.Held && h.m != nil {
			_ = h.m.Respond([]byte("-NAK"))
			l.stats.handedBack.Add(1)
		}
		w.log.Info("handed back: the handler could not run", append(attrs, "error", o.err)...)
		h.m = nil
	}
	return nil
}

// settle sends an ack (or term) whose answer comes on the lane's inbox;
// the key's next message starts only on that answer.
// An ack the handler's goroutine sent already (o.sent) is not sent again;
// its answer may have come before the result (h.answered).
func (k *keyed) settle(h *held, body []byte, o result) {
	s := &settling{body: body, reply: k.ackReply(h.seq), what: o.kind, parked: o.park != ""}
	h.settling = s
	k.acks[s.reply] = h
	if o.sent.IsZero() {
		k.sendSettle(h)
		return
	}
	s.tries, s.sent = 1, o.sent
	if h.answered {
		k.answered(s.reply)
	}
}

func (k *keyed) sendSettle(h *held) {
	s := h.settling
	s.tries++
	s.sent = time.Now()
	if err := k.l.w.nc.PublishRequest(h.m.Reply, s.reply, s.body); err != nil {
		k.l.w.log.Debug("cannot send the ack", "lane", k.l.name, "seq", h.seq, "error", err)
	}
}

// answered follows an answer from the server: to an ack (the message is
// settled, its key goes on) or to an in-progress ack.
func (k *keyed) answered(subject string) {
	l := k.l
	if seq, ok := strings.CutPrefix(subject, k.wpiPrefix); ok {
		if n, err := strconv.ParseUint(seq, 10, 64); err == nil {
			if h := k.bySeq[n]; h != nil {
				h.heard = time.Now()
			}
		}
		return
	}
	h := k.acks[subject]
	if h == nil {
		if seq, ok := strings.CutPrefix(subject, k.ackPrefix); ok {
			n, _ := strconv.ParseUint(seq, 10, 64)
			if h := k.bySeq[n]; h != nil && h.running {
				h.answered = true // before its handler's result: see settle
			}
		}
		return // or late: already given up on
	}
	delete(k.acks, subject)
	switch {
	case h.settling.what == doTerm:
		l.stats.terminated.Add(1)
	case h.settling.parked:
		l.stats.parked.Add(1)
	default:
		l.stats.processed.Add(1)
	}
	k.forget(h)
	l.processed.Store(max(l.processed.Load(), h.seq))
	l.skipSettled(h)
	k.dispatch(h.key)
}

// forget drops a settled message.
func (k *keyed) forget(h *held) {
	delete(k.bySeq, h.seq)
	q := k.keys[h.key]
	if i := slices.Index(q.open, h); i >= 0 {
		q.open = slices.Delete(q.open, i, i+1)
	}
	if len(q.open) == 0 {
		delete(k.keys, h.key)
	}
}

// tick: in-progress acks for what is held, acks whose answer is late, the
// sync, a pull request to renew, the window's record.
func (k *keyed) tick() error {
	l, w := k.l, k.l.w
	info := l.info.Load()
	now := time.Now()
	oldest := time.Time{}
	for _, h := range k.bySeq {
		if h.running && (oldest.IsZero() || h.started.Before(oldest)) {
			oldest = h.started
		}
		if h.m == nil || h.settling != nil {
			continue
		}
		deadline := info.deadline(h.msg.Attempt)
		if h.running && now.Sub(h.heard) > deadline*7/10 && h.cancel != nil {
			// The server has not answered for most of the ack wait: the
			// message may be redelivered; the handler stops first.
			h.cancel(errLostContact)
		}
		if w.cfg.NoProgressAcks && h.running {
			continue
		}
		last := h.got
		if h.lastWPI.After(last) {
			last = h.lastWPI
		}
		if now.Sub(last) >= deadline/5 {
			h.lastWPI = now
			_ = w.nc.PublishRequest(h.m.Reply, k.wpiPrefix+strconv.FormatUint(h.seq, 10), []byte("+WPI"))
		}
	}
	if !oldest.IsZero() {
		l.stats.since.Store(oldest.UnixNano()) // the age of the oldest message running
	}
	for _, h := range k.acks {
		if now.Sub(h.settling.sent) < w.cfg.Timeout {
			continue
		}
		if h.settling.tries < 3 && w.nc.IsConnected() {
			k.sendSettle(h)
			continue
		}
		l.stats.unconfirmed.Add(1)
		return fmt.Errorf("%w: the server did not confirm the ack of seq %d", errRestart, h.seq)
	}
	if n, err := k.dropped(); err == nil && n > 0 {
		// The inbox is sized for the window; should nats.go still have
		// dropped a delivery (a slow consumer), its key's next message
		// could run first: begin again, in sync.
		w.log.Error("the lane's inbox dropped messages (a slow consumer): beginning the session again", "lane", l.name, "dropped", n)
		return fmt.Errorf("%w: the inbox dropped %d messages", errRestart, n)
	}
	if !k.draining && info.group != "" && k.pin == "" && now.After(k.unpinAt) && (!k.synced || k.unpins < idlePinChecks) {
		k.unpins++
		k.unpinAt = now.Add(pinPatience(k.unpins))
		// Out of sync, messages are out and none came: unpin. In sync
		// (an idle lane, as far as the session knows), only if another
		// holds the pin: a request left behind took it before this
		// session's request reached the server (see pinPatience).
		if !k.synced || k.pinTakenElsewhere() {
			level := slog.LevelDebug
			if k.unpins == 1 {
				level = slog.LevelInfo // once a session: the later ones wait, as often, for messages out elsewhere
			}
			w.log.Log(context.Background(), level, "no delivery under a pin: unpinned again", "lane", l.name, "times", k.unpins, "in_sync", k.synced)
			w.unpin(l.name, info.group)
		}
	}
	if !k.draining && !k.retryAt.IsZero() && !now.Before(k.retryAt) {
		k.retryAt = time.Time{}
		l.ask(k.p)
	} else if !k.draining && k.p.sub != nil && k.retryAt.IsZero() {
		l.ensure(k.p)
	}
	l.recordWindow(k.window(), false)
	l.recordProgress(time.Now())
	return nil
}

// sync checks that every message the server has out of the lane is held
// here: its count of messages out equals what is held, and its last
// delivery is the last one seen (so none went elsewhere, and none is on
// its way). Until then nothing runs; then every key starts.
func (k *keyed) sync() {
	l := k.l
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	ci, err := l.w.api.ConsumerInfo(ctx, l.w.cfg.Stream, l.name)
	cancel()
	if err != nil {
		k.later()
		return
	}
	if ci.Delivered.Consumer < k.syncBase {
		k.syncBase = 0 // the lane was reset since the session began: its delivery sequence began again at 1
	}
	if (ci.NumAckPending != len(k.bySeq) || ci.Delivered.Consumer != max(k.lastDseq, k.syncBase)) && !l.w.cfg.noFence {
		k.later()
		return
	}
	k.synced = true
	for key := range k.keys {
		k.dispatch(key)
	}
	k.onSkip() // a request that came while out of sync
}

// later checks the sync again after a growing wait: 5ms, doubling, at
// most a second (what is out elsewhere comes back after its ack wait).
func (k *keyed) later() {
	k.syncWait = min(max(2*k.syncWait, 5*time.Millisecond), time.Second)
	k.syncT.Reset(k.syncWait)
}

// drain stops pulling: the session ends once what is held has run and is
// settled, or can go no further (a key waits for a redelivery). The inbox
// stays open for the answers to its acks; what a request still waiting at
// the server brings meanwhile is given back when the session ends.
func (k *keyed) drain() { k.draining = true }

// cancelAll stops every running handler.
func (k *keyed) cancelAll(cause error) {
	for _, h := range k.bySeq {
		if h.cancel != nil {
			h.cancel(cause)
		}
	}
}

// stop ends a session: it stops pulling, waits for the handlers still
// running (what succeeded is acked, if the lane is still held), and gives
// back with a nak what it held and did not run, so that the next session
// or owner gets it at once. A lane that lapsed acks and naks nothing:
// another instance may hold it already.
func (k *keyed) stop(ok bool) {
	l := k.l
	if !ok || l.standing() == membership.Lapsed {
		k.cancelAll(errLapsed) // nothing of this instance may still run
	}
	left := k.spare
	if k.p.sub != nil {
		left = append(left, k.p.stop()...)
	}
	for k.running > 0 {
		o := <-k.results
		o.h.running = false
		k.running--
		if o.kind == doAck && o.h.m != nil && (!o.sent.IsZero() || l.standing() == membership.Held) {
			if o.sent.IsZero() {
				_ = o.h.m.Respond(ackBody)
			}
			k.forget(o.h)
			if o.park == "" {
				l.stats.processed.Add(1)
			} else {
				l.stats.parked.Add(1)
			}
		}
	}
	l.stats.end()
	if l.standing() == membership.Held {
		for _, h := range k.bySeq {
			if h.m != nil && h.settling == nil {
				_ = h.m.Respond([]byte("-NAK"))
				l.stats.handedBack.Add(1)
			}
		}
		for _, m := range left {
			_ = m.Respond([]byte("-NAK"))
		}
	}
	l.stats.window.Store(nil)
}

var errLapsed = errors.New("the lane may be served by another instance now (this instance's lease may have run out)")

// window is what the session holds, for the lane's record and the status.
func (k *keyed) window() *membership.Window {
	info := k.l.info.Load()
	win := &membership.Window{Size: info.maxAckPending, Held: len(k.bySeq), Keys: len(k.keys), At: time.Now().UTC()}
	var oldest *held
	for key, q := range k.keys {
		if q.open[0].running {
			win.RunningCount++
			if len(win.Running) < membership.WindowKeysNamed {
				win.Running = append(win.Running, key)
			}
		}
		if len(q.open) == win.Size && win.Size > 1 {
			win.Holder = key
		}
		for _, h := range q.open[1:] {
			if oldest == nil || h.got.Before(oldest.got) {
				oldest = h
			}
		}
	}
	slices.Sort(win.Running)
	if oldest != nil {
		win.Oldest = &membership.Waiting{Key: oldest.key, Seq: oldest.seq, Since: oldest.got.UTC()}
	}
	return win
}

// recordWindow keeps the lane's window for the status and metrics, and
// writes it into the lane's record every RecordEvery at most, in the
// background; now writes it at once (a session's beginning: the record
// then says the lane is served key-parallel, which its next owner must
// know).
func (l *lane) recordWindow(win *membership.Window, now bool) {
	l.stats.window.Store(win)
	if now {
		l.windowAt = time.Now()
		if err := l.writeRecord(func(r *membership.LaneServer) { r.Window = win }); err != nil && !errors.Is(err, membership.ErrClaimLost) {
			l.w.log.Debug("cannot record the lane's window", "lane", l.name, "error", err)
		}
		return
	}
	if time.Since(l.windowAt) < RecordEvery || !l.w.nc.IsConnected() || !l.recMu.TryLock() {
		return
	}
	l.windowAt = time.Now()
	go func() {
		defer l.recMu.Unlock()
		if err := l.writeRecordLocked(func(r *membership.LaneServer) { r.Window = win }); err != nil && !errors.Is(err, membership.ErrClaimLost) {
			l.w.log.Debug("cannot record the lane's window", "lane", l.name, "error", err)
		}
	}()
}

// dropped is how many messages nats.go dropped from the lane's inbox.
func (k *keyed) dropped() (int, error) {
	if k.p.sub == nil {
		return 0, nil
	}
	return k.p.sub.Dropped()
}
