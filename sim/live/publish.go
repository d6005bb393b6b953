package live

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishWindow is how many publishes may wait for their ack at once: deep
// enough to publish a backlog at full speed, small enough to bound memory.
const publishWindow = 256

// publisher sends the workload's messages in order on the design's subject
// inside the sandbox; the stream's subject transform partitions them. Each
// carries its index in a header, and every publish is confirmed by the
// stream. Publishes on one connection are stored in the order sent; the
// window only bounds how far the confirmations may lag.
type publisher struct {
	r      *strategyRun
	js     jetstream.JetStream
	window []jetstream.PubAckFuture
	sent   int
}

func (r *strategyRun) newPublisher() (*publisher, error) {
	js, err := jetstream.NewWithAPIPrefix(r.c.NC, r.c.APIPrefix,
		jetstream.WithPublishAsyncMaxPending(2*publishWindow),
		jetstream.WithPublishAsyncTimeout(r.c.Timeout))
	if err != nil {
		return nil, err
	}
	return &publisher{r: r, js: js, window: make([]jetstream.PubAckFuture, 0, publishWindow)}, nil
}

// backlog is the number of leading messages that arrive at time 0 (all of
// them for rate 0). They are published before the clock starts, so they are
// waiting in the stream at time 0, as the model assumes.
func (r *strategyRun) backlog() int {
	n := 0
	for n < len(r.w.Messages) && r.w.Messages[n].At <= 0 {
		n++
	}
	return n
}

// send publishes messages up to (excluding) to, each at its At offset from
// the start, and waits for every confirmation. It returns nil without
// finishing when ctx is cancelled: stopping is not a failure.
func (p *publisher) send(ctx context.Context, to int) error {
	r := p.r
	for ; p.sent < to; p.sent++ {
		i, m := p.sent, r.w.Messages[p.sent]
		if m.At > 0 {
			if wait := m.At - r.now(); wait > 0 && !sleepCtx(ctx, wait) {
				return nil
			}
		}
		msg := &nats.Msg{Subject: r.subjects[m.Key], Header: nats.Header{headerMsg: []string{strconv.Itoa(i)}}}
		f, err := p.js.PublishMsgAsync(msg, jetstream.WithExpectStream(r.box.stream))
		if err != nil {
			return p.failed(ctx, i, err)
		}
		if len(p.window) == cap(p.window) {
			if err := p.confirm(ctx, p.window[0], i); err != nil {
				return err
			}
			p.window = append(p.window[:0], p.window[1:]...)
		}
		p.window = append(p.window, f)
	}
	for _, f := range p.window {
		if err := p.confirm(ctx, f, p.sent); err != nil {
			return err
		}
	}
	p.window = p.window[:0]
	return nil
}

// confirm waits for one publish's confirmation.
func (p *publisher) confirm(ctx context.Context, f jetstream.PubAckFuture, i int) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return p.failed(ctx, i, err)
	case <-ctx.Done():
		return nil
	}
}

func (p *publisher) failed(ctx context.Context, i int, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	r := p.r
	return fmt.Errorf("publishing message %d of %d to %s: %w", i+1, len(r.w.Messages), r.box.stream, r.c.Classify(ctx, err))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
