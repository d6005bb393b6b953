package work

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// puller keeps one pull request (batch 1) waiting at the server for a
// lane, on the lane's own inbox. It is driven by the lane's goroutine
// only. Keeping a request waiting while a message is processed lets the
// server deliver the next message the moment it applies the ack (it cannot
// before: max ack pending is 1), so a message costs one round trip, not two.
type puller struct {
	nc        *nats.Conn
	subject   string // <api>CONSUMER.MSG.NEXT.<stream>.<lane>
	inbox     string
	group     string // priority group of a pinned lane
	expiry    time.Duration
	heartbeat time.Duration
	sub       *nats.Subscription
	ch        chan *nats.Msg

	pinID       string    // the pin this instance holds, sent with each request
	outstanding bool      // a request is believed to wait at the server
	expires     time.Time // when it ends
	lastHeard   time.Time // last message or heartbeat on the inbox
	queued      []event   // read by drain, not yet acted on
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
)

func newPuller(nc *nats.Conn, apiPrefix, stream, lane, group string, expiry time.Duration) (*puller, error) {
	p := &puller{
		nc:        nc,
		subject:   apiPrefix + "CONSUMER.MSG.NEXT." + stream + "." + lane,
		inbox:     nc.NewInbox(),
		group:     group,
		expiry:    expiry,
		heartbeat: min(max(expiry/6, time.Second), 5*time.Second),
		ch:        make(chan *nats.Msg, 64),
	}
	var err error
	p.sub, err = nc.ChanSubscribe(p.inbox, p.ch)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// request sends a new pull request.
func (p *puller) request() error {
	var b strings.Builder
	b.WriteString(`{"batch":1,"expires":`)
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
	p.outstanding, p.expires, p.lastHeard = true, now.Add(p.expiry), now
	return p.nc.PublishRequest(p.subject, p.inbox, []byte(b.String()))
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
func (p *puller) note(m *nats.Msg) pullEvent {
	p.lastHeard = time.Now()
	status := m.Header.Get("Status")
	if status == "" && len(m.Reply) > 0 {
		p.outstanding = false // batch of 1: this request is done
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

// stop drains the subscription: the server is told to stop sending (a
// request still waiting there then has no interest and is skipped, so the
// lane's next message goes to its new owner), and whatever it sent before
// that still reaches the channel instead of being dropped by the client.
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
			if m.Header.Get("Status") == "" && len(m.Reply) > 0 {
				left = append(left, m)
			}
		default:
			return left
		}
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
			if ev := p.note(m); ev != evHeartbeat && ev != evEnded {
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
