package work

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// puller keeps a pull request waiting at the server for a lane, and
// receives the answers to the lane's acks, on the lane's own inbox:
// <inbox>.p for deliveries and pull statuses, <inbox>.a<n> for the answer
// to the lane's n-th confirmed ack. It is driven by the lane's goroutine
// only.
//
// An idle lane's request asks for one message (a serial lane) or a window
// (a key-parallel one), and waits long, with heartbeats, both paced by the
// number of lanes the instance serves (see pace). A serial lane that is
// draining keeps a standing request instead (busy): many messages, a
// short expiry, no heartbeat, so that a message costs the server its ack
// only. Max ack pending 1 still holds the next message back until the ack
// is applied.
type puller struct {
	nc        *nats.Conn
	subject   string // <api>CONSUMER.MSG.NEXT.<stream>.<lane>
	inbox     string
	pullReply string                                   // <inbox>.p
	ackPrefix string                                   // <inbox>.a
	expiry    time.Duration                            // of the last request
	group     string                                   // priority group of a pinned lane
	batch     int                                      // messages an idle request asks for: 1 on a serial lane
	pace      func() (expiry, heartbeat time.Duration) // an idle request's, now
	// standing is what a busy serial lane's request asks for (0: the lane
	// keeps no standing request), for busyFor.
	standing int
	busyFor  time.Duration
	busy     bool // the lane is draining: ask with a standing request
	sub      *nats.Subscription
	ch       chan *nats.Msg
	nudge    *nudger     // wakes a serial lane waiting on ch
	acks     uint64      // confirmed acks asked so far
	timer    *time.Timer // reused for ack answers

	pinID       string        // the pin this instance holds, sent with each request
	outstanding bool          // a request is believed to wait at the server
	left        int           // messages it may still bring
	expires     time.Time     // when it ends
	heartbeat   time.Duration // of the last request; 0: none
	lastHeard   time.Time     // last message or heartbeat on the inbox
	queued      []event       // read while waiting for an ack, not yet acted on
	lastAck     *nats.Msg     // the last message acked without an answer (sent again after a reconnect)
}

// standingBatch is how many messages a busy serial lane's standing
// request asks for: max ack pending 1 still lets only one out at a time.
const standingBatch = 512

// busyFor is how long a busy serial lane's standing request waits: under
// half the lane's ack deadline, so that a holder frozen with its request
// waiting (a SIGSTOP, a long pause) takes at most one message in with it,
// which comes back after the ack deadline, as with a request for one
// message. 0.5 to 10 s.
func busyFor(info *laneInfo) time.Duration {
	return min(max(info.deadline(1)/2, 500*time.Millisecond), 10*time.Second)
}

// pullEvent is what a message on the inbox means.
type pullEvent int

const (
	evMessage   pullEvent = iota // a delivery
	evHeartbeat                  // the request is alive
	evEnded                      // the request is over (expired, batch done): ask again
	evPinLost                    // another client holds the pin now (423)
	evGone                       // the consumer was deleted
	evBusy                       // too many waiting requests or a leader change: ask again shortly
	evRefused                    // a bad request (e.g. the lane's priority group changed)
	evAckAnswer                  // the answer to an ack (a late one, if seen here)
)

// newPuller subscribes a lane's inbox. batch is how many messages a
// request asks for: 1 on a serial lane, the window on a key-parallel one;
// the inbox holds four times that (deliveries, and the answers to their
// acks and in-progress acks), so that nats.go never drops one as a slow
// consumer's.
func newPuller(nc *nats.Conn, apiPrefix, stream, lane, group string, pace func() (time.Duration, time.Duration), batch int) (*puller, error) {
	inbox := nc.NewInbox()
	p := &puller{
		nc:        nc,
		subject:   apiPrefix + "CONSUMER.MSG.NEXT." + stream + "." + lane,
		inbox:     inbox,
		pullReply: inbox + ".p",
		ackPrefix: inbox + ".a",
		group:     group,
		batch:     batch,
		pace:      pace,
		ch:        make(chan *nats.Msg, 64+4*batch),
		timer:     time.NewTimer(time.Hour),
	}
	p.nudge = &nudger{ch: p.ch}
	p.timer.Stop()
	var err error
	p.sub, err = nc.ChanSubscribe(inbox+".*", p.ch)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// nudger wakes a serial lane waiting on its inbox, the one channel its
// loop waits on (see lane.serve): a control signal sends a nil message,
// at most one at a time, so that the inbox keeps its room for what the
// server sends. Whoever reads the nil from the inbox calls woke.
type nudger struct {
	ch      chan *nats.Msg
	pending atomic.Bool
}

// nudge wakes the lane, unless a nudge already waits for it. A full inbox
// is not nudged: the lane looks at its control signals after each message
// it takes from it.
func (n *nudger) nudge() {
	if n.pending.CompareAndSwap(false, true) {
		select {
		case n.ch <- nil:
		default:
			n.pending.Store(false)
		}
	}
}

// woke: the nudge was taken from the inbox; the next one is sent.
func (n *nudger) woke() { n.pending.Store(false) }

// request sends a new pull request: a standing one while the lane is
// busy, else an idle one.
func (p *puller) request() error {
	batch, expiry, heartbeat := p.standing, p.busyFor, time.Duration(0)
	if !p.busy || p.standing == 0 {
		batch = p.batch
		expiry, heartbeat = p.pace()
	}
	var b strings.Builder
	b.WriteString(`{"batch":`)
	b.WriteString(strconv.Itoa(batch))
	b.WriteString(`,"expires":`)
	b.WriteString(strconv.FormatInt(int64(expiry), 10))
	if heartbeat > 0 {
		b.WriteString(`,"idle_heartbeat":`)
		b.WriteString(strconv.FormatInt(int64(heartbeat), 10))
	}
	if p.group != "" {
		b.WriteString(`,"group":`)
		b.WriteString(strconv.Quote(p.group))
		if p.pinID != "" {
			b.WriteString(`,"id":`)
			b.WriteString(strconv.Quote(p.pinID))
		}
	}
	b.WriteByte('}')
	now := time.Now()
	p.outstanding, p.left, p.expires, p.lastHeard, p.heartbeat = true, batch, now.Add(expiry), now, heartbeat
	p.expiry = expiry
	return p.nc.PublishRequest(p.subject, p.pullReply, []byte(b.String()))
}

// ensure sends a request unless a live one waits: none is out, it ends
// within a second (a quarter of a short one), or the server has been
// silent for three heartbeats (a request lost to a reconnect or a leader
// change).
func (p *puller) ensure() error {
	if p.live() {
		return nil
	}
	return p.request()
}

// live: a request waits at the server that is not about to end, and the
// server has not been silent for three of its heartbeats.
func (p *puller) live() bool { return p.liveAt(time.Now()) }

// liveAt is live as of now, a time just read.
func (p *puller) liveAt(now time.Time) bool {
	return p.outstanding && p.expires.Sub(now) > min(time.Second, p.expiry/4) && (p.heartbeat == 0 || now.Sub(p.lastHeard) < 3*p.heartbeat)
}

// checkEvery is how often the lane should look whether its request is
// still alive (ensure): every heartbeat, or a standing request's expiry.
func (p *puller) checkEvery() time.Duration {
	if p.heartbeat > 0 {
		return p.heartbeat
	}
	return max(p.expiry, 100*time.Millisecond)
}

// heartbeatBudget is how many heartbeats a second an instance asks of the
// server for its idle lanes, at most, once it serves more lanes than five
// seconds' worth of it: beyond that the heartbeats (and the expiry, five
// of them) grow with the lane count instead. At 16,384 lanes a heartbeat
// every 128 s, a request every 10 min 40 s per lane: about 180 server
// wake-ups a second, against about 4,400 with 5 s and 30 s. (256 a second
// measured 2.7x the server's idle CPU at 16,384 lanes, 128 2.3x: see
// docs/performance.md.)
const heartbeatBudget = 128

// pace is the expiry and heartbeat of an idle lane's request, for an
// instance serving lanes lanes with a configured expiry: a heartbeat a
// sixth of the expiry, 1 to 5 s, then stretched to the budget. A request
// lost without a reconnect or leader change to say so (those make every
// lane ask again at once) is noticed after three heartbeats.
func pace(expiry time.Duration, lanes int) (time.Duration, time.Duration) {
	hb := min(max(expiry/6, time.Second), 5*time.Second)
	if stretched := time.Duration(lanes) * time.Second / heartbeatBudget; stretched > hb {
		hb = stretched.Round(time.Second)
		expiry = max(expiry, 5*hb)
	}
	return expiry, hb
}

// note reads one inbox message and updates the request state.
// Deliveries carry the message's own subject; statuses come on <inbox>.p.
func (p *puller) note(m *nats.Msg) pullEvent { return p.noteAt(m, time.Now()) }

// noteAt is note for a message that came at now.
func (p *puller) noteAt(m *nats.Msg, now time.Time) pullEvent {
	if strings.HasPrefix(m.Subject, p.ackPrefix) {
		return evAckAnswer
	}
	p.lastHeard = now
	status := m.Header.Get("Status")
	if status == "" && len(m.Reply) > 0 {
		p.left--
		p.outstanding = p.left > 0 // the request is done once its batch came
		if id := m.Header.Get("Nats-Pin-Id"); id != "" {
			p.pinID = id
		}
		return evMessage
	}
	desc := strings.ToLower(m.Header.Get("Description"))
	switch status {
	case "100":
		return evHeartbeat
	case "404", "408":
		if p.outstanding && time.Until(p.expires) > min(time.Second, p.expiry/4) {
			// An older request's end (ensure asked again as it was
			// ending): the newer one still waits.
			return evHeartbeat
		}
		p.outstanding = false
		return evEnded
	case "423":
		p.outstanding, p.pinID = false, ""
		return evPinLost
	case "409":
		p.outstanding = false
		switch {
		case strings.Contains(desc, "deleted"):
			return evGone
		case strings.Contains(desc, "batch completed"), strings.Contains(desc, "size exceeds"):
			return evEnded
		}
		return evBusy
	}
	p.outstanding = false
	return evRefused
}

var (
	errNoAnswer    = errors.New("no answer from the server")
	errReconnected = errors.New("reconnected while waiting for the server's answer")
)

// confirm sends an ack (or term) for m and waits up to timeout for the
// server's answer, which comes once the ack is applied (replicated, on a
// clustered lane). Whatever else arrives meanwhile (the next message,
// statuses) is queued for the lane loop. A reconnect (reconnected
// signalled) ends the wait with errReconnected: the answer went with the
// old connection. A stopped puller (a lane being handed over, whose inbox
// is gone) asks with a plain request.
func (p *puller) confirm(m *nats.Msg, body []byte, timeout time.Duration, reconnected <-chan struct{}) error {
	if p.sub == nil {
		_, err := p.nc.Request(m.Reply, body, timeout)
		return err
	}
	p.acks++
	want := p.ackPrefix + strconv.FormatUint(p.acks, 10)
	if err := p.nc.PublishRequest(m.Reply, want, body); err != nil {
		return err
	}
	p.timer.Reset(timeout)
	defer p.timer.Stop()
	for {
		select {
		case a := <-p.ch:
			if a == nil {
				p.nudge.woke() // the lane looks at what nudged it after the ack
				continue
			}
			if a.Subject == want {
				return nil
			}
			if ev := p.note(a); ev != evHeartbeat && ev != evEnded && ev != evAckAnswer {
				p.queued = append(p.queued, event{a, ev})
			}
		case <-p.timer.C:
			return errNoAnswer
		case <-reconnected:
			return errReconnected
		}
	}
}

// stop drains the subscription: the server is told to stop sending (a
// request still waiting at a server that knows the inbox is gone is
// skipped; in a cluster the lane's leader may learn it late: see
// lane.finish), and whatever it sent before that still reaches the channel
// instead of being dropped by the client.
// Messages received are returned for the caller to hand back.
func (p *puller) stop() []*nats.Msg {
	if p.sub != nil {
		closed := p.sub.StatusChanged(nats.SubscriptionClosed)
		if err := p.sub.Drain(); err != nil {
			_ = p.sub.Unsubscribe()
		} else {
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
			}
		}
		p.sub = nil
	}
	p.outstanding = false
	var left []*nats.Msg
	for _, e := range p.queued {
		if e.ev == evMessage {
			left = append(left, e.m)
		}
	}
	p.queued = nil
	for {
		select {
		case m := <-p.ch:
			if m == nil {
				continue // a nudge: the lane is ending
			}
			if !strings.HasPrefix(m.Subject, p.ackPrefix) && m.Header.Get("Status") == "" && len(m.Reply) > 0 {
				left = append(left, m)
			}
		default:
			return left
		}
	}
}

// detach hands the subscription, with the request waiting on it, to a new
// puller that only lingers (see lane.finish); p goes on without one. The
// deliveries queued so far are added to left, to be handed back.
func (p *puller) detach(left []*nats.Msg) (*puller, []*nats.Msg) {
	for _, e := range p.queued {
		if e.ev == evMessage {
			left = append(left, e.m)
		}
	}
	d := &puller{nc: p.nc, pullReply: p.pullReply, ackPrefix: p.ackPrefix, sub: p.sub, ch: p.ch, nudge: p.nudge,
		outstanding: true, expires: p.expires}
	p.sub, p.ch, p.queued, p.outstanding = nil, make(chan *nats.Msg, 1), nil, false
	p.nudge = &nudger{ch: p.ch}
	return d, left
}

// lingerFor bounds how long a released lane's inbox stays open: far
// longer than a route takes to carry the inbox's loss of interest to the
// lane's leader (milliseconds), far shorter than an ack wait.
const lingerFor = time.Second

// linger keeps a released lane's inbox open until its waiting request ends
// (a status, or the message it brings, which is handed back at once), for
// lingerFor at most, or until done; then it stops the subscription and
// hands back what is left.
func (p *puller) linger(done context.Context) {
	timer := time.NewTimer(min(time.Until(p.expires), lingerFor))
	defer timer.Stop()
	for p.outstanding {
		select {
		case m := <-p.ch:
			if m == nil {
				continue // a nudge for the lane that let it go
			}
			ev := p.note(m)
			if ev == evMessage {
				_ = m.Respond([]byte("-NAK"))
			}
		case <-timer.C:
			p.outstanding = false
		case <-done.Done():
			p.outstanding = false
		}
	}
	for _, m := range p.stop() {
		_ = m.Respond([]byte("-NAK"))
	}
}

// event is an inbox message with what it meant, held back for the lane loop.
type event struct {
	m  *nats.Msg
	ev pullEvent
}

// drain reads what piled up in the channel while a handler ran (heartbeats,
// the end of an expired request), so the request state is current before
// the ack. Anything the lane loop must act on is queued for it.
func (p *puller) drain() { p.drainAt(time.Now()) }

// drainAt is drain as of now, a time just read.
func (p *puller) drainAt(now time.Time) {
	for {
		select {
		case m := <-p.ch:
			if m == nil {
				p.nudge.woke() // the lane looks at what nudged it before it waits
				continue
			}
			if ev := p.noteAt(m, now); ev != evHeartbeat && ev != evEnded && ev != evAckAnswer {
				p.queued = append(p.queued, event{m, ev})
			}
		default:
			return
		}
	}
}

// next takes a held-back event, if any.
func (p *puller) next() (event, bool) {
	if len(p.queued) == 0 {
		return event{}, false
	}
	e := p.queued[0]
	p.queued = p.queued[1:]
	return e, true
}
