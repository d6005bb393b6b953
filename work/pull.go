package work

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// puller keeps one pull request (batch 1) waiting at the server for a
// lane, and receives the answers to the lane's acks, on the lane's own
// inbox: <inbox>.p for deliveries and pull statuses, <inbox>.a<n> for the
// answer to the lane's n-th confirmed ack. It is driven by the lane's
// goroutine only.
//
// The request for the next message goes out with the ack of the current
// one (one write): the server cannot deliver the next message before it
// applied the ack (max ack pending is 1), and delivers it right after, so
// the ack's answer and the next message arrive together and a message
// costs one round trip. The next message is read only after the ack's
// answer.
type puller struct {
	nc        *nats.Conn
	subject   string // <api>CONSUMER.MSG.NEXT.<stream>.<lane>
	inbox     string
	pullReply string // <inbox>.p
	ackPrefix string // <inbox>.a
	group     string // priority group of a pinned lane
	batch     int    // messages a request asks for: 1 on a serial lane
	expiry    time.Duration
	heartbeat time.Duration
	sub       *nats.Subscription
	ch        chan *nats.Msg
	acks      uint64      // confirmed acks asked so far
	timer     *time.Timer // reused for ack answers

	pinID       string    // the pin this instance holds, sent with each request
	outstanding bool      // a request is believed to wait at the server
	left        int       // messages it may still bring
	expires     time.Time // when it ends
	lastHeard   time.Time // last message or heartbeat on the inbox
	queued      []event   // read while waiting for an ack, not yet acted on
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
func newPuller(nc *nats.Conn, apiPrefix, stream, lane, group string, expiry time.Duration, batch int) (*puller, error) {
	inbox := nc.NewInbox()
	p := &puller{
		nc:        nc,
		subject:   apiPrefix + "CONSUMER.MSG.NEXT." + stream + "." + lane,
		inbox:     inbox,
		pullReply: inbox + ".p",
		ackPrefix: inbox + ".a",
		group:     group,
		batch:     batch,
		expiry:    expiry,
		heartbeat: min(max(expiry/6, time.Second), 5*time.Second),
		ch:        make(chan *nats.Msg, 64+4*batch),
		timer:     time.NewTimer(time.Hour),
	}
	p.timer.Stop()
	var err error
	p.sub, err = nc.ChanSubscribe(inbox+".*", p.ch)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// request sends a new pull request.
func (p *puller) request() error {
	var b strings.Builder
	b.WriteString(`{"batch":`)
	b.WriteString(strconv.Itoa(p.batch))
	b.WriteString(`,"expires":`)
	b.WriteString(strconv.FormatInt(int64(p.expiry), 10))
	b.WriteString(`,"idle_heartbeat":`)
	b.WriteString(strconv.FormatInt(int64(p.heartbeat), 10))
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
	p.outstanding, p.left, p.expires, p.lastHeard = true, p.batch, now.Add(p.expiry), now
	return p.nc.PublishRequest(p.subject, p.pullReply, []byte(b.String()))
}

// ensure sends a request unless a live one waits: none is out, it ends
// within a second, or the server has been silent for three heartbeats (a
// request lost to a reconnect or a leader change).
func (p *puller) ensure() error {
	now := time.Now()
	if p.outstanding && p.expires.Sub(now) > time.Second && now.Sub(p.lastHeard) < 3*p.heartbeat {
		return nil
	}
	return p.request()
}

// note reads one inbox message and updates the request state.
// Deliveries carry the message's own subject; statuses come on <inbox>.p.
func (p *puller) note(m *nats.Msg) pullEvent {
	if strings.HasPrefix(m.Subject, p.ackPrefix) {
		return evAckAnswer
	}
	p.lastHeard = time.Now()
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
	d := &puller{nc: p.nc, pullReply: p.pullReply, ackPrefix: p.ackPrefix, sub: p.sub, ch: p.ch,
		outstanding: true, expires: p.expires}
	p.sub, p.ch, p.queued, p.outstanding = nil, make(chan *nats.Msg, 1), nil, false
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
func (p *puller) drain() {
	for {
		select {
		case m := <-p.ch:
			if ev := p.note(m); ev != evHeartbeat && ev != evEnded && ev != evAckAnswer {
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
