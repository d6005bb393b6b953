package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

var (
	errLostContact    = errors.New("no answer from the server to in-progress acks for most of the ack wait: stopped so that the redelivery cannot run beside it")
	errMaxProcessTime = errors.New("exceeded the max process time")
)

// lane serves one lane while this instance owns it: pull one message, run
// the handler (sending in-progress acks), settle the message with a
// confirmed ack, take the next. Only its own goroutine touches the puller.
type lane struct {
	w     *Worker
	name  string
	since time.Time // when this instance took the lane
	info  atomic.Pointer[laneInfo]
	stats *laneStats

	release     chan struct{} // closed: finish the message in hand, then stop
	releaseOnce sync.Once
	resumed     chan struct{} // the lane was resumed: pull again
	done        chan struct{}

	// The in-progress ack timer, one per lane, armed while a handler runs.
	wpi *time.Timer
	cur atomic.Pointer[inflight]
}

func newLane(w *Worker, info *laneInfo, stats *laneStats) *lane {
	l := &lane{w: w, name: info.name, since: time.Now(), stats: stats, release: make(chan struct{}), done: make(chan struct{}), resumed: make(chan struct{}, 1)}
	l.info.Store(info)
	l.wpi = time.AfterFunc(time.Hour, l.progress)
	l.wpi.Stop()
	return l
}

// resume wakes the lane after its consumer was resumed.
func (l *lane) resume() {
	select {
	case l.resumed <- struct{}{}:
	default:
	}
}

func (l *lane) requestRelease() { l.releaseOnce.Do(func() { close(l.release) }) }

func (l *lane) releasing() bool {
	select {
	case <-l.release:
		return true
	default:
		return false
	}
}

// run serves the lane until it is released, deleted, or the worker aborts.
func (l *lane) run() {
	defer close(l.done)
	defer l.wpi.Stop()
	w := l.w
	info := l.info.Load()
	if info.group != "" {
		// Whoever held the pin (an instance that died, or the one handing
		// the lane over) loses it now; without this a dead holder's pin
		// would last its pinned TTL. It cannot let two handlers run: the
		// message in flight still holds the lane's one ack-pending slot.
		w.unpin(l.name, info.group)
	}
	w.recordLane(l.name, l.since)
	p, err := newPuller(w.nc, w.cfg.APIPrefix, w.cfg.Stream, l.name, info.group, w.cfg.PullExpiry)
	if err != nil {
		w.log.Error("cannot subscribe for lane", "lane", l.name, "error", err)
		return
	}
	watchdog := time.NewTicker(p.heartbeat)
	defer watchdog.Stop()
	pinCheck := newPinCheck(info.group != "")
	defer pinCheck.stop()
	l.ask(p)
	for {
		if e, ok := p.next(); ok {
			if !l.on(p, e) {
				return
			}
			continue
		}
		select {
		case <-l.release:
			l.finish(p)
			return
		case <-w.abort.Done():
			l.finish(p)
			return
		case m := <-p.ch:
			if !l.on(p, event{m, p.note(m)}) {
				return
			}
		case <-watchdog.C:
			if p.sub != nil {
				l.ensure(p)
			}
		case <-l.resumed:
			// nats-server (2.11-2.15) does not wake the requests already
			// waiting when a paused consumer is resumed through the API; a
			// new request does.
			l.ask(p)
		case <-pinCheck.c():
			if g := l.info.Load().group; g != "" && p.pinID == "" && p.sub != nil {
				w.unpin(l.name, g)
				l.ask(p)
			}
			pinCheck.next(p.pinID == "")
		}
	}
}

func (l *lane) ask(p *puller) {
	p.group = l.info.Load().group
	if err := p.request(); err != nil {
		l.w.log.Warn("pull request failed", "lane", l.name, "error", err)
	}
}

func (l *lane) ensure(p *puller) {
	p.group = l.info.Load().group
	if err := p.ensure(); err != nil {
		l.w.log.Warn("pull request failed", "lane", l.name, "error", err)
	}
}

// on acts on one inbox event; false ends the lane.
func (l *lane) on(p *puller, e event) bool {
	w := l.w
	switch e.ev {
	case evMessage:
		if l.releasing() || w.abort.Err() != nil {
			l.finish(p, e.m) // delivered as the lane was handed over: give it back
			return false
		}
		return l.process(p, e.m)
	case evEnded:
		l.ask(p)
	case evAckAnswer: // late: its ack was given up on
	case evPinLost:
		w.log.Debug("pin taken by another instance", "lane", l.name)
		l.ask(p)
	case evGone:
		w.log.Debug("lane deleted", "lane", l.name)
		l.finish(p)
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

// inflight is the message a lane's handler is running.
type inflight struct {
	m         *nats.Msg
	deadline  time.Duration // the server redelivers this long after the last in-progress ack
	every     time.Duration
	confirmed atomic.Int64 // unix nanos of the last answer from the server about this message
	cancel    context.CancelCauseFunc
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
	f := l.cur.Load()
	if f == nil {
		return
	}
	_, err := l.w.nc.Request(f.m.Reply, []byte("+WPI"), f.every/2)
	if err == nil {
		f.confirmed.Store(time.Now().UnixNano())
	} else if !f.ours() {
		f.cancel(errLostContact)
	}
	if l.cur.Load() == f {
		l.wpi.Reset(f.every)
	}
}

// process runs one message and settles it; false ends the lane.
func (l *lane) process(p *puller, m *nats.Msg) bool {
	w := l.w
	info := l.info.Load()
	meta, err := m.Metadata()
	if err != nil {
		w.log.Warn("not a JetStream delivery", "lane", l.name, "subject", m.Subject, "error", err)
		l.ask(p)
		return true
	}
	msg := &Msg{
		Stream:    w.cfg.Stream,
		Lane:      l.name,
		Partition: info.partition,
		Subject:   m.Subject,
		Key:       info.keyOf(m.Subject),
		Seq:       meta.Sequence.Stream,
		Attempt:   int(meta.NumDelivered),
		Published: meta.Timestamp,
		Header:    m.Header,
		Data:      m.Data,
		Instance:  w.cfg.Instance,
	}
	if m.Header.Get("Nats-Pin-Id") != "" {
		msg.Header = nats.Header{}
		for k, v := range m.Header {
			if k != "Nats-Pin-Id" {
				msg.Header[k] = v
			}
		}
	}
	start := time.Now()
	f, err := l.handle(info, m, msg)
	took := time.Since(start)
	l.stats.done(took)
	p.drain()

	// A lane that is being handed over stops pulling before the ack, so
	// the next message goes to the new owner; otherwise the request for
	// the next message goes out with the ack.
	if l.releasing() || w.abort.Err() != nil {
		l.finish(p)
	} else {
		l.ensure(p)
	}
	if !l.settle(p, f, msg, info, err) && p.sub != nil {
		l.resync(p)
	}
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
	f = &inflight{m: m, deadline: deadline, every: max(deadline/5, 20*time.Millisecond)}
	f.confirmed.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancelCause(w.abort)
	defer cancel(nil)
	f.cancel = cancel
	l.cur.Store(f)
	if !w.cfg.NoProgressAcks {
		l.wpi.Reset(f.every)
	}
	l.stats.begin()
	defer func() {
		l.cur.Store(nil)
		l.wpi.Stop()
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
func (l *lane) settle(p *puller, f *inflight, msg *Msg, info *laneInfo, herr error) bool {
	w := l.w
	m := f.m
	attrs := []any{"lane", l.name, "seq", msg.Seq, "key", msg.Key, "attempt", msg.Attempt}
	if herr == nil {
		if err := l.confirm(p, m, []byte("+ACK")); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("ack not confirmed: the message will be redelivered", append(attrs, "error", err)...)
			return false
		}
		l.stats.processed.Add(1)
		return true
	}
	switch {
	case errors.Is(herr, errLostContact):
		// Not ours any more, or soon not: the ack wait redelivers it.
		l.stats.failed.Add(1)
		w.log.Warn("handler stopped", append(attrs, "error", herr)...)
		return true
	case w.abort.Err() != nil && errors.Is(herr, context.Canceled):
		if f.ours() {
			_ = m.Respond([]byte("-NAK"))
		}
		l.stats.handedBack.Add(1)
		w.log.Info("handed back unfinished", attrs...)
		return true
	case isOutage(herr):
		// The handler could not run, and the lane is handed over: the
		// message goes back at once, as no failure of its own.
		if f.ours() {
			_ = m.Respond([]byte("-NAK"))
		}
		l.stats.handedBack.Add(1)
		w.log.Info("handed back: the handler could not run", append(attrs, "error", herr)...)
		return true
	}
	l.stats.failed.Add(1)
	kind, want := classify(herr)
	park := w.cfg.DeadLetter != "" && (kind == outcomeTerm || w.cfg.OnPoison == Park && msg.Attempt >= w.cfg.ParkAfter)
	switch {
	case park:
		reason := "failed " + strconv.Itoa(msg.Attempt) + " time(s)"
		if kind == outcomeTerm {
			reason = "terminated by the handler"
		}
		if err := w.park(m, msg, reason, herr); err != nil {
			w.log.Error("cannot park the message: it will be retried", append(attrs, "dead_letter", w.cfg.DeadLetter, "error", err)...)
			l.nak(f, info, msg.Attempt, -1)
			return true
		}
		if err := l.confirm(p, m, []byte("+ACK")); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("ack of a parked message not confirmed: it will be redelivered and parked again (deduplicated)", append(attrs, "error", err)...)
			return false
		}
		l.stats.parked.Add(1)
		w.log.Warn("message parked", append(attrs, "dead_letter", w.cfg.DeadLetter, "reason", reason, "error", herr)...)
	case kind == outcomeTerm:
		if err := l.confirm(p, m, []byte("+TERM "+oneLine(herr.Error(), 256))); err != nil {
			l.stats.unconfirmed.Add(1)
			w.log.Error("term not confirmed: the message will be redelivered", append(attrs, "error", err)...)
			return false
		}
		l.stats.terminated.Add(1)
		w.log.Warn("message terminated by the handler", append(attrs, "error", herr)...)
	default:
		after := l.nak(f, info, msg.Attempt, want)
		level := "will retry"
		if info.maxDeliver > 0 && msg.Attempt >= info.maxDeliver {
			level = "the server drops it now: max deliver reached"
		}
		w.log.Warn("handler failed", append(attrs, "error", herr, "retry_in", after.String(), "next", level)...)
	}
	return true
}

// nak asks for a redelivery after the lane's backoff (or want) and returns
// the effective delay. A nak on a message no longer ours could release it
// while another instance runs it, so none is sent then.
func (l *lane) nak(f *inflight, info *laneInfo, attempt int, want time.Duration) time.Duration {
	send, effective := info.nakDelay(attempt, want)
	if !f.ours() {
		return info.deadline(attempt)
	}
	body := []byte("-NAK")
	if send > 0 {
		body = fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(send))
	}
	_ = f.m.Respond(body)
	return effective
}

// confirm sends an ack (or term) and waits for the server's answer, which
// comes once the ack is applied (replicated, on a clustered lane).
func (l *lane) confirm(p *puller, m *nats.Msg, body []byte) error {
	var err error
	for try := 0; try < 3; try++ {
		if err = p.confirm(m, body, l.w.cfg.Timeout); err == nil {
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) || l.w.abort.Err() != nil {
			return err
		}
	}
	return err
}

// pinCheck unpins a pinned lane that this instance serves but holds no
// pin for, 2s after it took the lane, then at growing intervals up to 30s,
// until a message comes. nats-server (2.11-2.15) can give a new pin to a
// waiting request whose client is gone (an instance killed or handing the
// lane over, whose request had no pin id yet): the request is then
// dropped, the pin stays with nobody, and every other request waits for
// the pinned TTL (2 minutes by default). Unpinning when nobody should
// hold the pin is harmless: the lane's one message out is unaffected.
type pinCheck struct {
	t     *time.Timer
	every time.Duration
}

func newPinCheck(pinned bool) *pinCheck {
	pc := &pinCheck{every: 2 * time.Second}
	if pinned {
		pc.t = time.NewTimer(pc.every)
	}
	return pc
}

func (pc *pinCheck) c() <-chan time.Time {
	if pc.t == nil {
		return nil
	}
	return pc.t.C
}

// next re-arms the check while the lane still has no pin.
func (pc *pinCheck) next(pinless bool) {
	if !pinless {
		pc.every = 2 * time.Second
	} else {
		pc.every = min(2*pc.every, 30*time.Second)
	}
	pc.t.Reset(pc.every)
}

func (pc *pinCheck) stop() {
	if pc.t != nil {
		pc.t.Stop()
	}
}
