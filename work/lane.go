package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

var (
	errLostContact    = errors.New("no answer from the server to in-progress acks for most of the ack wait: stopped so that the redelivery cannot run beside it")
	errMaxProcessTime = errors.New("exceeded the max process time")
)

// claimRetry is how often a lane waiting for its holder reads the record
// again when no watch event woke it (a missed event must not strand it).
const claimRetry = 2 * time.Second

// lane serves one lane while this instance owns it: take the lane's
// record (its lock), pull one message, run the handler (sending
// in-progress acks), settle the message with a confirmed ack, take the
// next. Only its own goroutine touches the puller and the claim.
type lane struct {
	w     *Worker
	name  string
	since time.Time // when this instance took the lane
	info  atomic.Pointer[laneInfo]
	stats *laneStats

	// epoch is the membership epoch the lane is served under, ended
	// when it ends (see fence), and lapsed its Done.
	epoch  string
	ended  context.Context
	lapsed <-chan struct{}
	// The lane's record: claim is written under recMu (by the lane's
	// goroutine, and by the in-progress ack timer for a long message);
	// lost is closed when a write finds it taken by another instance.
	recMu    sync.Mutex
	claim    *membership.Claim
	lost     chan struct{}
	lostOnce sync.Once
	// processed is the stream sequence of the last message acked;
	// recorded when the record last said so (the lane's goroutine only).
	processed   atomic.Uint64
	recorded    time.Time
	recordedSeq uint64
	deleted     bool // the server said the lane was deleted
	switchedNow bool // serve ended to serve the lane the other way

	release     chan struct{} // closed: finish the message in hand, then stop
	releaseOnce sync.Once
	repull      chan struct{} // the lane was resumed, or the connection came back: pull again
	kick        chan struct{} // the lane's record or the membership changed: try to take it again
	switching   chan struct{} // its keys in flight went from 1 to more, or back: settle, serve the new way
	resyncs     chan struct{} // a reconnect or a new leader: deliveries may have been lost (key-parallel lanes begin again)
	skipc       chan struct{} // a skip request came for the lane (skip.go)
	// ctl is poked by every control signal above but kick (and by a
	// release, a lost record, the worker's abort and the serial lane's
	// timers), so that a serial lane waits on its inbox alone, nudged
	// (inbox) while it waits there (see serve).
	ctl        chan struct{}
	inbox      atomic.Pointer[nudger]
	stopPoking func() bool
	checkDue   chan struct{} // a serial lane's watchdog: look whether its request still waits (see serve)
	pinDue     chan struct{} // a serial lane's pin check is due (see pinCheck)
	resetPast  uint64        // a serial lane's consumer was reset past this message: a delivery of it is dropped
	windowAt   time.Time     // when the record last got the window (key-parallel)
	done       chan struct{}

	// abort is the worker's, per lane: it ends the running message's
	// context (see handle). Each message's context is a child of values,
	// abort's values without its cancel, so that starting one registers
	// nothing with a parent that lanes would contend for.
	abort       context.Context
	abortCancel context.CancelFunc
	values      context.Context

	// The in-progress ack timer, one per lane, armed while the lane runs
	// messages.
	wpi *progressTimer
	cur atomic.Pointer[inflight]
}

func newLane(w *Worker, info *laneInfo, stats *laneStats) *lane {
	l := &lane{w: w, name: info.name, since: time.Now(), stats: stats, release: make(chan struct{}), done: make(chan struct{}),
		repull: make(chan struct{}, 1), kick: make(chan struct{}, 1), switching: make(chan struct{}, 1), resyncs: make(chan struct{}, 1), lost: make(chan struct{}),
		skipc: make(chan struct{}, 1), ctl: make(chan struct{}, 1), checkDue: make(chan struct{}, 1), pinDue: make(chan struct{}, 1)}
	l.info.Store(info)
	l.abort, l.abortCancel = context.WithCancel(w.abort)
	l.values = context.WithoutCancel(l.abort)
	l.stopPoking = context.AfterFunc(l.abort, func() {
		l.wakeServe()
		if f := l.cur.Load(); f != nil {
			f.cancel(context.Cause(l.abort))
		}
	})
	if w.skips.pending(l.name) != nil {
		l.poke(l.skipc) // asked before the lane was taken
	}
	l.epoch, l.ended = w.fence().CurrentContext()
	l.lapsed = l.ended.Done()
	l.wpi = newProgressTimer(l.progress)
	return l
}

// resume wakes the lane to send a new pull request: after its consumer was
// resumed.
func (l *lane) resume() { l.poke(l.repull) }

// relost wakes the lane after a reconnect or a new leader for it: the
// requests that waited at the server are gone, and so may be deliveries
// on their way. A serial lane asks again (max ack pending 1 holds its next
// message back until a lost one comes again); a key-parallel lane begins
// its session again, running nothing until it is in sync.
func (l *lane) relost() {
	signal(l.repull)
	l.poke(l.resyncs)
}

// remode makes the lane settle what it has out and serve again, serial or
// key-parallel as its keys in flight now say.
func (l *lane) remode() { l.poke(l.switching) }

// wake makes a lane waiting for its holder's hand-over try again.
func (l *lane) wake() { signal(l.kick) }

// poke signals c, and the lane's control channel.
func (l *lane) poke(c chan struct{}) {
	signal(c)
	l.wakeServe()
}

// wakeServe signals the lane's control channel, and wakes a serial lane
// waiting on its inbox.
func (l *lane) wakeServe() {
	signal(l.ctl)
	if n := l.inbox.Load(); n != nil {
		n.nudge()
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (l *lane) requestRelease() {
	l.releaseOnce.Do(func() {
		close(l.release)
		l.wakeServe()
	})
}

func (l *lane) releasing() bool {
	select {
	case <-l.release:
		return true
	default:
		return false
	}
}

// standing says what the lane may still do under its epoch; a lane whose
// record another instance took has lapsed, whatever its epoch.
func (l *lane) standing() membership.Standing { return l.standingAt(time.Now()) }

// standingAt is standing as of now, a time just read.
func (l *lane) standingAt(now time.Time) membership.Standing {
	select {
	case <-l.lost:
		return membership.Lapsed
	default:
	}
	return l.w.fence().CheckAt(l.epoch, now)
}

// writeRecord rewrites the lane's record with change, if this instance
// still holds it (a compare-and-set on its revision). A record another
// instance took ends the lane at once, as a lapsed epoch does.
func (l *lane) writeRecord(change func(*membership.LaneServer)) error {
	l.recMu.Lock()
	defer l.recMu.Unlock()
	return l.writeRecordLocked(change)
}

func (l *lane) writeRecordLocked(change func(*membership.LaneServer)) error {
	if l.claim == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.Timeout)
	defer cancel()
	err := l.w.records().Update(ctx, l.claim, change)
	if errors.Is(err, membership.ErrClaimLost) {
		l.lostOnce.Do(func() {
			l.w.log.Warn("the lane's record was taken by another instance: giving the lane up", "lane", l.name)
			close(l.lost)
			l.wakeServe()
		})
	}
	return err
}

// recordProgress writes the last message processed into the lane's record,
// every RecordEvery at most, in the background: the lane goes on with its
// next message meanwhile. Nothing is written while the connection is down,
// or while another write of the record is under way.
func (l *lane) recordProgress(now time.Time) {
	seq := l.processed.Load()
	if seq == l.recordedSeq || now.Sub(l.recorded) < RecordEvery || !l.w.nc.IsConnected() || !l.recMu.TryLock() {
		return
	}
	l.recorded, l.recordedSeq = now, seq
	go func() {
		defer l.recMu.Unlock()
		if err := l.writeRecordLocked(func(r *membership.LaneServer) { r.Processed = max(r.Processed, seq) }); err != nil && !errors.Is(err, membership.ErrClaimLost) {
			l.w.log.Debug("cannot record the lane's position", "lane", l.name, "error", err)
		}
	}()
}

// run takes the lane and serves it until it is released, deleted, its
// epoch ends or the worker aborts; a lane given up in good order is
// handed over (its record marked released) after its last ack.
func (l *lane) run() {
	defer close(l.done)
	defer l.abortCancel()
	defer l.stopPoking()
	defer l.wpi.stop()
	if !l.take() {
		return
	}
	l.stats.serving.Store(true)
	defer l.stats.serving.Store(false)
	// A lane its last owner served key-parallel may have several
	// messages out: it is served so until none is.
	keyed := l.claim.Prior != nil && l.claim.Prior.Window != nil
	for {
		var ok bool
		if keyed || l.info.Load().keys > 1 {
			ok = l.serveKeyed()
		} else {
			ok = l.serve()
		}
		if !ok || l.standing() == membership.Lapsed {
			return
		}
		if l.releasing() || l.deleted || l.w.abort.Err() != nil || !l.switched() {
			break
		}
		keyed = false
	}
	if l.w.abort.Err() != nil || !l.w.nc.IsConnected() {
		// Stopping at once, or no server to tell: the others take the
		// lane when this instance's key is gone (a stop removes it).
		return
	}
	seq := l.processed.Load()
	hand := func(r *membership.LaneServer) {
		r.Released, r.InFlight, r.Outage, r.Window, r.Processed = true, nil, nil, nil, max(r.Processed, seq)
	}
	if l.deleted {
		// The record of a deleted lane says where it was for a while (lanes
		// apply --missing-lane-start recorded), then expires.
		l.recMu.Lock()
		err := l.w.records().Retire(l.claim, hand, l.w.cfg.Timeout)
		l.recMu.Unlock()
		if err != nil && !errors.Is(err, membership.ErrClaimLost) {
			l.w.log.Debug("cannot record where the deleted lane was", "lane", l.name, "error", err)
		}
		return
	}
	if err := l.writeRecord(hand); err != nil && !errors.Is(err, membership.ErrClaimLost) {
		l.w.log.Warn("cannot mark the lane handed over: the next owner takes it when this instance's lease ends", "lane", l.name, "error", err)
	}
}

// switched: the lane ended its serving to serve again the other way
// (serial, key-parallel); it reads the flag once.
func (l *lane) switched() bool {
	s := l.switchedNow
	l.switchedNow = false
	return s
}

// take waits until the lane's record lets this instance hold it, and
// writes it so. The holder named by the record hands the lane over after
// its last ack, or loses it when its lease ends; a change of the record or
// of the membership wakes the lane, and it also looks again every
// claimRetry in case an event was missed. False: the lane was released,
// the epoch ended or the worker stopped first.
func (l *lane) take() bool {
	w := l.w
	waitingFor := ""
	for {
		if wait := time.Until(w.claimsFrom()); wait > 0 {
			select {
			case <-time.After(wait):
			case <-l.lapsed:
			case <-l.release:
			case <-w.abort.Done():
			}
		}
		if l.standing() != membership.Held || l.releasing() || w.abort.Err() != nil {
			return false
		}
		rec := membership.LaneServer{Instance: w.cfg.Instance, Since: l.since, Epoch: l.epoch, DeadLetter: w.cfg.DeadLetter}
		c, holder, err := w.takeRecord(l.name, rec)
		switch {
		case c != nil:
			l.claim = c
			if waitingFor != "" {
				w.log.Debug("lane handed over", "lane", l.name, "from", waitingFor)
			}
			return true
		case err != nil:
			w.log.Debug("cannot take the lane yet", "lane", l.name, "error", err)
		case holder != waitingFor:
			w.log.Debug("waiting for the lane's hand-over", "lane", l.name, "holder", holder)
			waitingFor = holder
		}
		select {
		case <-l.kick:
		case <-time.After(claimRetry):
		case <-l.lapsed:
		case <-l.release:
		case <-w.abort.Done():
		}
	}
}

// serve pulls and processes the lane's messages while it is held. True:
// the lane was given up in good order (released, stopped, deleted), so
// its record may say it was handed over; false: its epoch lapsed.
func (l *lane) serve() bool {
	w := l.w
	info := l.info.Load()
	if info.group != "" {
		// Whoever held the pin (an instance that died, or the one handing
		// the lane over) loses it now; without this a dead holder's pin
		// would last its pinned TTL. From here on every pull carries this
		// instance's pin, and the server refuses any other client's.
		w.unpin(l.name, info.group)
	}
	p, err := newPuller(w.nc, w.apiPrefix, w.cfg.Stream, l.name, info.group, w.pullPace, 1)
	if err != nil {
		w.log.Error("cannot subscribe for lane", "lane", l.name, "error", err)
		return true
	}
	p.standing, p.busyFor = standingBatch, busyFor(info)
	// The lane waits on its inbox alone, since a select costs per case
	// each time the lane waits, which a draining lane does once a
	// message: every control signal pokes ctl and nudges the inbox with a
	// nil message, and the loop looks at ctl before each wait.
	l.inbox.Store(p.nudge)
	defer l.inbox.Store(nil)
	stopLapse := context.AfterFunc(l.ended, l.wakeServe)
	defer stopLapse()
	received(l.checkDue) // left by an earlier serve
	received(l.pinDue)
	l.ask(p)
	// The watchdog pokes rather than being waited on: a goroutine
	// waiting on a timer's channel puts the timer in the runtime's heap
	// and takes it out again each time.
	every := p.checkEvery()
	watchdog := time.AfterFunc(every, func() { l.poke(l.checkDue) })
	defer watchdog.Stop()
	expiry, _ := w.pullPace()
	pinCheck := newPinCheck(info.group != "", expiry+5*time.Second, func() { l.poke(l.pinDue) })
	defer pinCheck.stop()
	for {
		if d := p.checkEvery(); d != every {
			every = d
			watchdog.Reset(d)
		}
		if e, ok := p.next(); ok {
			if !l.on(p, e) {
				return l.standing() != membership.Lapsed
			}
			continue
		}
		if received(l.ctl) {
			if end, ok := l.control(p); end {
				return ok
			}
			if received(l.checkDue) {
				if p.sub != nil {
					l.ensure(p)
				}
				watchdog.Reset(every)
			}
			if received(l.pinDue) {
				if g := l.info.Load().group; g != "" && p.pinID == "" && p.sub != nil && l.standing() == membership.Held {
					w.unpin(l.name, g)
					l.ask(p)
				}
				pinCheck.next(p.pinID == "")
			}
			continue // more may have come meanwhile
		}
		if received(l.lapsed) {
			l.abandon(p)
			return false
		}
		m := <-p.ch
		if m == nil {
			p.nudge.woke()
			continue
		}
		if now := time.Now(); !l.onAt(p, event{m, p.noteAt(m, now)}, now) {
			return l.standing() != membership.Lapsed
		}
	}
}

// control acts on the signals that poked a serial lane's ctl. end: serve
// ends, and returns ok.
func (l *lane) control(p *puller) (end, ok bool) {
	w := l.w
	if l.standing() == membership.Lapsed {
		l.abandon(p)
		return true, false
	}
	if l.releasing() || w.abort.Err() != nil {
		l.finish(p)
		return true, true
	}
	if received(l.switching) {
		l.finish(p)
		l.switchedNow = true
		return true, true
	}
	if received(l.skipc) {
		l.skipIdle(p)
	}
	if received(l.repull) {
		// nats-server (2.11-2.15) does not wake the requests already
		// waiting when a paused consumer is resumed through the API; a
		// new request does. A reconnect or a new consumer leader loses
		// them: ask at once, rather than after three missed heartbeats.
		// The last ack, sent without waiting for its answer, may have
		// been lost with them: it goes again (a repeated ack does
		// nothing), while the lane is surely still this instance's.
		if p.lastAck != nil && l.standing() == membership.Held && w.nc.IsConnected() {
			_ = p.lastAck.Respond([]byte("+ACK"))
			p.lastAck = nil
		}
		l.ask(p)
	}
	return false, false
}

// received takes a signal from c, if one waits.
func received(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ask sends a new pull request, if the lane may still pull: never once its
// epoch may have ended, and not while the connection is down (nats.go
// would buffer it and send it on reconnect, when the lane may have moved;
// the reconnect wakes the lane to ask then).
func (l *lane) ask(p *puller) {
	if !l.mayPull(p) {
		return
	}
	p.group = l.info.Load().group
	if err := p.request(); err != nil {
		l.w.log.Warn("pull request failed", "lane", l.name, "error", err)
	}
}

// ensure sends a pull request unless a live one waits (see puller.ensure).
func (l *lane) ensure(p *puller) { l.ensureAt(p, time.Now()) }

// ensureAt is ensure as of now, a time just read.
func (l *lane) ensureAt(p *puller, now time.Time) {
	if p.liveAt(now) || !l.mayPullAt(p, now) {
		return
	}
	p.group = l.info.Load().group
	if err := p.ensure(); err != nil {
		l.w.log.Warn("pull request failed", "lane", l.name, "error", err)
	}
}

func (l *lane) mayPull(p *puller) bool { return l.mayPullAt(p, time.Now()) }

func (l *lane) mayPullAt(p *puller, now time.Time) bool {
	if l.standingAt(now) != membership.Held || !l.w.nc.IsConnected() {
		p.outstanding = false
		return false
	}
	return true
}

// on acts on one inbox event; false ends the lane.
func (l *lane) on(p *puller, e event) bool { return l.onAt(p, e, time.Now()) }

// onAt is on as of now, a time read as the event came.
func (l *lane) onAt(p *puller, e event, now time.Time) bool {
	w := l.w
	switch e.ev {
	case evMessage:
		switch st := l.standingAt(now); {
		case st == membership.Lapsed:
			l.abandon(p, 1) // another instance may hold the lane and run it: drop it unrun
			return false
		case l.releasing() || w.abort.Err() != nil || st == membership.Left:
			l.finish(p, e.m) // delivered as the lane was handed over: give it back
			return false
		}
		return l.process(p, e.m)
	case evEnded:
		if p.busy && p.left == p.standing {
			p.busy = false // a standing request that brought nothing: the lane is idle
		}
		l.ask(p)
	case evAckAnswer: // late: its ack was given up on
	case evPinLost:
		// The server refused this instance's pin: another instance took
		// the lane's pin. Only a holder that lost its epoch can see that
		// (a new owner takes the pin only once the record lets it).
		w.log.Debug("pin taken by another instance", "lane", l.name)
		l.ask(p)
	case evGone:
		w.log.Debug("lane deleted", "lane", l.name)
		l.finish(p)
		l.deleted = true
		w.laneDeleted(l.name)
		return false
	case evBusy, evRefused:
		if e.ev == evRefused {
			w.log.Warn("pull refused by the server: "+refusal(e.m), "lane", l.name)
			w.relistSoon() // the lane's config may have changed (priority group)
		}
		select {
		case <-time.After(time.Second):
		case <-l.release:
		case <-w.abort.Done():
		}
		l.ask(p)
	}
	return true
}

// finish stops pulling and hands back, with a plain nak (redelivered at
// once, to the new owner), any message that reached this instance after
// the lane was released. A pinned lane is unpinned so its new owner gets
// the pin without waiting for the pinned TTL.
//
// In a cluster, a request still waiting at the server is not dropped with
// the subscription at once: the lane's leader may be on another node,
// which learns a moment later that the inbox lost interest, and a message
// it sends in that moment would be lost until its ack wait. So the inbox
// stays open a little longer (linger), and a message it brings is handed
// back at once. A single server drops the request with the subscription,
// and skips it: nothing lingers there, since a lingering request takes
// the next message and costs it a delivery attempt.
func (l *lane) finish(p *puller, extra ...*nats.Msg) {
	left := extra
	if p.sub != nil && p.outstanding && l.w.abort.Err() == nil && l.w.nc.ConnectedClusterName() != "" {
		var lingering *puller
		lingering, left = p.detach(left)
		go lingering.linger(l.w.abort)
	} else {
		left = append(left, p.stop()...)
	}
	for _, m := range left {
		_ = m.Respond([]byte("-NAK"))
	}
	if g := l.info.Load().group; g != "" && p.pinID != "" {
		l.w.unpin(l.name, g)
	}
}

// abandon stops pulling once the lane's epoch lapsed (or its record was
// taken): whatever reached the inbox is dropped unrun and without a nak,
// since another instance may hold the lane and run it; it comes back
// after its ack wait. held counts messages already taken from the inbox.
func (l *lane) abandon(p *puller, held ...int) {
	if p.sub == nil {
		return
	}
	dropped := len(p.stop())
	for _, n := range held {
		dropped += n
	}
	why := "this instance's membership lease may have run out"
	select {
	case <-l.lost:
		why = "its record was taken by another instance"
	default:
	}
	l.w.log.Warn("lane given up: "+why+", so another instance may serve it; what arrived is dropped unrun and comes back after its ack wait",
		"lane", l.name, "dropped_unrun", dropped)
}

// mayNak: a nak for f cannot release it while another instance runs it
// (the server answered about it recently, and the lane's epoch holds).
func (l *lane) mayNak(f *inflight) bool { return f.ours() && l.standing() != membership.Lapsed }

// inflight is the message a lane's handler is running.
type inflight struct {
	m         *nats.Msg
	seq       uint64
	attempt   int
	started   time.Time
	usual     time.Duration // the lane's usual processing time when it started
	deadline  time.Duration // the server redelivers this long after the last in-progress ack
	every     time.Duration
	confirmed atomic.Int64 // unix nanos of the last answer from the server about this message
	cancel    context.CancelCauseFunc
	slow      atomic.Bool // the lane's record says it runs long
}

// ours: the server has answered recently enough that the message cannot
// have been redelivered elsewhere yet, so acting on it (a nak above all,
// which would release it again) is safe.
func (f *inflight) ours() bool {
	return time.Since(time.Unix(0, f.confirmed.Load())) < f.deadline*7/10
}

// progress is the in-progress ack timer: +WPI as a request, so that the
// answer proves the server restarted its ack wait. When the server has not
// answered for 70% of the deadline, the handler is stopped before the
// message can be redelivered beside it.
func (l *lane) progress() {
	l.wpi.fired()
	f := l.cur.Load()
	if f == nil {
		return // the lane is idle: its next message arms the timer again
	}
	if early := f.every - time.Since(f.started); early > 0 {
		l.wpi.by(time.Now(), early) // armed for an earlier message
		return
	}
	_, err := l.w.nc.Request(f.m.Reply, []byte("+WPI"), f.every/2)
	if err == nil {
		f.confirmed.Store(time.Now().UnixNano())
	} else if !f.ours() {
		f.cancel(errLostContact)
	}
	if time.Since(f.started) >= SlowAfter(f.usual) && l.stats.outage.Load() == nil && !f.slow.Swap(true) {
		go l.recordSlow(f)
	}
	if l.cur.Load() == f {
		l.wpi.by(time.Now(), f.every)
	}
}

// recordSlow says in the lane's record that f has run long, so that
// inspect can tell a hung handler from a busy lane: the in-progress acks
// keep it looking alive to the server.
func (l *lane) recordSlow(f *inflight) {
	l.recMu.Lock()
	defer l.recMu.Unlock()
	if l.cur.Load() != f {
		return // it ended meanwhile
	}
	l.w.log.Warn("a message has been running long", "lane", l.name, "seq", f.seq, "attempt", f.attempt,
		"running", time.Since(f.started).Round(time.Second).String(), "usual", f.usual.String())
	in := &membership.InFlight{Seq: f.seq, Attempt: f.attempt, Since: f.started.UTC(), Usual: f.usual}
	if err := l.writeRecordLocked(func(r *membership.LaneServer) { r.InFlight = in }); err != nil {
		l.w.log.Debug("cannot record the long message", "lane", l.name, "error", err)
	}
}

// clearSlow takes a message that ran long out of the lane's record.
func (l *lane) clearSlow(f *inflight) {
	if f == nil || !f.slow.Load() {
		return
	}
	_ = l.writeRecord(func(r *membership.LaneServer) { r.InFlight = nil })
}

// message is what the handler gets of a delivery.
func (l *lane) message(m *nats.Msg, d delivery) *Msg {
	info := l.info.Load()
	msg := &Msg{
		Stream:    l.w.cfg.Stream,
		Lane:      l.name,
		Partition: info.partition,
		Subject:   m.Subject,
		Key:       info.keyOf(m.Subject),
		Seq:       d.seq,
		Attempt:   d.attempt,
		Published: d.published,
		Header:    m.Header,
		Data:      m.Data,
		Instance:  l.w.cfg.Instance,
	}
	// The pin is the lane's business, not the handler's; it was read when
	// the delivery came in.
	delete(m.Header, "Nats-Pin-Id")
	return msg
}

// process runs one message and settles it; false ends the lane. The
// clock is read as the message comes (onAt), as its handler starts and as
// it ends, each reading serving the checks made then.
func (l *lane) process(p *puller, m *nats.Msg) bool {
	w := l.w
	info := l.info.Load()
	d, ok := parseDelivery(m.Reply)
	if !ok {
		w.log.Warn("not a JetStream delivery", "lane", l.name, "subject", m.Subject, "reply", m.Reply)
		l.ask(p)
		return true
	}
	msg := l.message(m, d)
	p.busy = true // messages are coming: a standing request from now on (see puller)
	if l.skipDelivery(p, m, msg) {
		l.recordProgress(time.Now())
		return p.sub != nil // skipped, not run
	}
	if l.quarantineDelivery(p, m, msg) {
		l.recordProgress(time.Now())
		return p.sub != nil // its key is quarantined: parked or held, not run
	}
	f, err := l.handle(info, m, msg)
	end := time.Now()
	took := end.Sub(f.started)
	l.clearSlow(f)
	p.drainAt(end)

	// A lane that is being handed over stops pulling before the ack, so
	// the next message goes to the new owner; otherwise the request for
	// the next message goes out with the ack. A lane whose epoch lapsed
	// still acks (the handler succeeded) but pulls nothing more.
	st := l.standingAt(end)
	switch {
	case st == membership.Lapsed:
		l.abandon(p)
	case l.releasing() || w.abort.Err() != nil || st == membership.Left:
		l.finish(p)
	default:
		l.ensureAt(p, end)
	}
	if !l.settle(p, f, msg, info, err, st) && p.sub != nil {
		l.resync(p)
	}
	l.stats.done(took) // after the ack, which the next message waits for
	l.recordProgress(end)
	return p.sub != nil
}

// resync follows an ack the server did not confirm: whatever was delivered
// after it may rest on an ack a failed leader never replicated, so it is
// given back, and a fresh request is sent.
func (l *lane) resync(p *puller) {
	p.drain()
	var keep []event
	for _, e := range p.queued {
		if e.ev == evMessage {
			_ = e.m.Respond([]byte("-NAK"))
			continue
		}
		keep = append(keep, e)
	}
	p.queued = keep
	p.outstanding = false
	l.ask(p)
}

// handle runs the handler with in-progress acks and the worker's abort,
// trying again while it cannot run at all (untilItRuns).
func (l *lane) handle(info *laneInfo, m *nats.Msg, msg *Msg) (f *inflight, err error) {
	w := l.w
	deadline := info.deadline(msg.Attempt)
	now := time.Now()
	f = &inflight{m: m, seq: msg.Seq, attempt: msg.Attempt, started: now, usual: time.Duration(l.stats.usual.Load()),
		deadline: deadline, every: max(deadline/5, 20*time.Millisecond)}
	f.confirmed.Store(now.UnixNano())
	ctx, cancel := context.WithCancelCause(l.values)
	defer cancel(nil)
	f.cancel = cancel
	l.cur.Store(f)
	if l.abort.Err() != nil {
		cancel(context.Cause(l.abort)) // aborted before the message was current
	}
	if !w.cfg.NoProgressAcks {
		l.wpi.by(now, f.every)
	}
	l.stats.begin(now)
	defer func() {
		l.cur.Store(nil)
		l.stats.end()
	}()
	return f, l.untilItRuns(ctx, msg)
}

// try runs the handler once, within the max process time, and recovers a
// panic into an error; an error says why ctx ended, if it did.
func (l *lane) try(ctx context.Context, msg *Msg) (err error) {
	if l.w.cfg.MaxProcessTime > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, l.w.cfg.MaxProcessTime, errMaxProcessTime)
		defer stop()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", cause, err)
			}
		}
	}()
	return l.w.handler.Handle(ctx, msg)
}

// settle acks, naks, terminates or parks the message as the handler's
// result says; false when an ack could not be confirmed.
func (l *lane) settle(p *puller, f *inflight, msg *Msg, info *laneInfo, herr error, st membership.Standing) bool {
	w := l.w
	m := f.m
	if herr == nil {
		if l.quickAck(p, info, st) {
			// No leader change can lose an applied ack here: the next
			// delivery is proof enough that it was applied (max ack
			// pending 1), and nothing waits for an answer.
			if err := m.Respond([]byte("+ACK")); err != nil {
				l.stats.unconfirmed.Add(1)
				w.log.Error("ack not sent: the message will be redelivered", l.attrs(msg, "error", err)...)
				return false
			}
			p.lastAck = m
		} else if err := l.confirm(p, m, []byte("+ACK")); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("ack not confirmed: the message will be redelivered", l.attrs(msg, "error", err)...)
			return false
		}
		l.stats.processed.Add(1)
		l.processed.Store(msg.Seq)
		l.skipRan(msg.Seq)
		return true
	}
	if e := w.skips.at(l.name, msg.Seq); e != nil && !errors.Is(herr, errLostContact) && f.ours() {
		return l.settleSkip(p, f, msg, e) // its handler was stopped for a skip
	}
	switch {
	case errors.Is(herr, errLostContact):
		// Not ours any more, or soon not: the ack wait redelivers it.
		l.stats.failed.Add(1)
		w.log.Warn("handler stopped", l.attrs(msg, "error", herr)...)
		return true
	case w.abort.Err() != nil && errors.Is(herr, context.Canceled):
		if l.mayNak(f) {
			_ = m.Respond([]byte("-NAK"))
		}
		l.stats.handedBack.Add(1)
		w.log.Info("handed back unfinished", l.attrs(msg)...)
		return true
	case isOutage(herr):
		// The handler could not run, and the lane is handed over: the
		// message goes back at once, as no failure of its own.
		if !l.mayNak(f) {
			w.log.Info("given up: the handler could not run, and the lane may be served elsewhere now; the message comes back after its ack wait", l.attrs(msg, "error", herr)...)
			return true
		}
		_ = m.Respond([]byte("-NAK"))
		l.stats.handedBack.Add(1)
		w.log.Info("handed back: the handler could not run", l.attrs(msg, "error", herr)...)
		return true
	}
	l.stats.failed.Add(1)
	kind, want := classify(herr)
	park := w.cfg.DeadLetter != "" && (kind == outcomeTerm || w.parksPoison(msg) && msg.Attempt >= w.cfg.ParkAfter)
	switch {
	case park:
		reason := "terminated by the handler"
		if kind != outcomeTerm {
			var qerr error
			if reason, qerr = w.poisonReason(msg, herr); qerr != nil {
				w.log.Error("cannot record the key's quarantine: the message will be retried", l.attrs(msg, "error", qerr)...)
				l.nak(f, info, msg.Attempt, -1)
				return true
			}
		}
		if err := w.park(m, msg, reason, herr); err != nil {
			w.log.Error("cannot park the message: it will be retried", l.attrs(msg, "dead_letter", w.cfg.DeadLetter, "error", err)...)
			l.nak(f, info, msg.Attempt, -1)
			return true
		}
		if err := l.confirm(p, m, []byte("+ACK")); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("ack of a parked message not confirmed: it will be redelivered and parked again (deduplicated)", l.attrs(msg, "error", err)...)
			return false
		}
		l.stats.parked.Add(1)
		l.processed.Store(msg.Seq)
		w.log.Warn("message parked", l.attrs(msg, "dead_letter", w.cfg.DeadLetter, "reason", reason, "error", herr)...)
	case kind == outcomeTerm:
		if err := l.confirm(p, m, []byte("+TERM "+planner.OneLine(herr.Error(), 256))); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("term not confirmed: the message will be redelivered", l.attrs(msg, "error", err)...)
			return false
		}
		l.stats.terminated.Add(1)
		l.processed.Store(msg.Seq)
		w.log.Warn("message terminated by the handler", l.attrs(msg, "error", herr)...)
	default:
		after := l.nak(f, info, msg.Attempt, want)
		level := "will retry"
		if info.maxDeliver > 0 && msg.Attempt >= info.maxDeliver {
			level = "the server drops it now: max deliver reached"
		}
		w.log.Warn("handler failed", l.attrs(msg, "error", herr, "retry_in", after.String(), "next", level)...)
	}
	return true
}

// attrs is what a log line about msg says, and extra: built only when a
// line is written (a message settled in order writes none).
func (l *lane) attrs(msg *Msg, extra ...any) []any {
	return append([]any{"lane", l.name, "seq", msg.Seq, "key", msg.Key, "attempt", msg.Attempt}, extra...)
}

// nak asks for a redelivery after the lane's backoff (or want) and returns
// the effective delay. A nak on a message no longer ours could release it
// while another instance runs it, so none is sent then.
func (l *lane) nak(f *inflight, info *laneInfo, attempt int, want time.Duration) time.Duration {
	send, effective := info.nakDelay(attempt, want)
	if !l.mayNak(f) {
		return info.deadline(attempt)
	}
	body := []byte("-NAK")
	if send > 0 {
		body = fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(send))
	}
	_ = f.m.Respond(body)
	return effective
}

// quickAck: the ack of a processed message may go without waiting for the
// server's answer. The answer is what keeps order across a leader change
// (a new leader that never got the ack redelivers the message after its
// successor ran), so a replicated lane waits for it; so does a lane being
// handed over (its next owner starts after the answer) or given up.
// st is the lane's standing, read just before.
func (l *lane) quickAck(p *puller, info *laneInfo, st membership.Standing) bool {
	return !info.replicated && p.sub != nil && !l.releasing() && l.w.abort.Err() == nil && st == membership.Held
}

// confirm sends an ack (or term) and waits for the server's answer, which
// comes once the ack is applied (replicated, on a clustered lane).
func (l *lane) confirm(p *puller, m *nats.Msg, body []byte) error {
	var err error
	for try := 0; try < 3; try++ {
		err = p.confirm(m, body, l.w.cfg.Timeout, l.repull)
		if errors.Is(err, errReconnected) {
			// The answer, and the request sent with the ack, went with
			// the old connection: ask again for both.
			p.outstanding = false
			defer l.resume()
			continue
		}
		if err == nil || errors.Is(err, nats.ErrConnectionClosed) || l.w.abort.Err() != nil {
			return err
		}
	}
	return err
}

// pinCheck unpins a pinned lane that this instance serves but holds no
// pin for, 2s after it took the lane, then at growing intervals up to 30s,
// until a message comes or a request left behind can no longer be
// waiting (the window: the longest an idle request waits, and 5 s more).
// nats-server (2.11-2.15) can give a new pin to a waiting request whose
// client is gone (an instance killed or handing the lane over, whose
// request had no pin id yet): the request is then dropped, the pin stays
// with nobody, and every other request waits for the pinned TTL (2
// minutes by default). Unpinning when nobody should hold the pin is
// harmless: the lane's one message out is unaffected. Bounded by the
// window, so that idle pinned lanes cost the server nothing after it.
type pinCheck struct {
	t     *time.Timer
	every time.Duration
	until time.Time
}

// newPinCheck calls due at each check, on the timer's goroutine.
func newPinCheck(pinned bool, window time.Duration, due func()) *pinCheck {
	pc := &pinCheck{every: 2 * time.Second, until: time.Now().Add(window)}
	if pinned {
		pc.t = time.AfterFunc(pc.every, due)
	}
	return pc
}

// next re-arms the check while the lane still has no pin and the window
// is open; the last check comes at its end.
func (pc *pinCheck) next(pinless bool) {
	left := time.Until(pc.until)
	if pc.t == nil {
		return
	}
	if !pinless || left <= 0 {
		pc.stop()
		pc.t = nil
		return
	}
	pc.every = min(2*pc.every, 30*time.Second)
	pc.t.Reset(min(pc.every, left))
}

func (pc *pinCheck) stop() {
	if pc.t != nil {
		pc.t.Stop()
	}
}
