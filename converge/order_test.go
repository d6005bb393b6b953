package converge_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// orderCheck publishes numbered messages per key and runs one worker per
// lane (lanes of any generation, found as they appear), checking that each
// key's numbers arrive exactly in order: no gap, no repeat, no reordering.
type orderCheck struct {
	t      testing.TB
	js     jetstream.JetStream
	stream string
	design string
	keys   []string

	mu         sync.Mutex
	published  map[string]int // key -> messages published
	seen       map[string]int // key -> last number processed
	lastFrom   map[string]string
	violations []string
	processed  atomic.Int64

	ctx     context.Context
	stop    context.CancelFunc
	workers sync.WaitGroup
	pub     sync.WaitGroup
	started map[string]bool
}

func newOrderCheck(t testing.TB, js jetstream.JetStream, stream, design string, keys int) *orderCheck {
	o := &orderCheck{t: t, js: js, stream: stream, design: design, published: map[string]int{}, seen: map[string]int{}, lastFrom: map[string]string{}, started: map[string]bool{}}
	for i := 0; i < keys; i++ {
		o.keys = append(o.keys, fmt.Sprintf("key%d", i))
	}
	o.ctx, o.stop = context.WithCancel(context.Background())
	t.Cleanup(func() { o.stop(); o.workers.Wait(); o.pub.Wait() })
	return o
}

// publish sends n messages round-robin over the keys, synchronously.
func (o *orderCheck) publish(n int) {
	for i := 0; i < n; i++ {
		o.publishOne(o.keys[i%len(o.keys)])
	}
}

func (o *orderCheck) publishOne(key string) {
	o.mu.Lock()
	o.published[key]++
	n := o.published[key]
	o.mu.Unlock()
	body := key + " " + strconv.Itoa(n)
	for attempt := 0; ; attempt++ {
		// The message ID makes a retry of a publish that was stored but not
		// acknowledged (a leader change in a cluster) a no-op.
		_, err := o.js.Publish(o.ctx, "msgs.received_from."+key, []byte(body), jetstream.WithMsgID(body))
		if err == nil || o.ctx.Err() != nil {
			return
		}
		if attempt == 0 {
			o.t.Logf("publish %q: %v (retrying)", body, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// publishUntil keeps publishing in the background until stopped.
func (o *orderCheck) publishInBackground() (stop func()) {
	ctx, cancel := context.WithCancel(o.ctx)
	o.pub.Add(1)
	go func() {
		defer o.pub.Done()
		for i := 0; ctx.Err() == nil; i++ {
			o.publishOne(o.keys[i%len(o.keys)])
		}
	}()
	return func() { cancel(); o.pub.Wait() }
}

// watchLanes starts a worker for every lane of the design that appears.
func (o *orderCheck) watchLanes() {
	o.workers.Add(1)
	go func() {
		defer o.workers.Done()
		for o.ctx.Err() == nil {
			s, err := o.js.Stream(o.ctx, o.stream)
			if err == nil {
				names := s.ConsumerNames(o.ctx)
				for n := range names.Name() {
					o.mu.Lock()
					start := strings.HasPrefix(n, o.design+"-n") && !strings.HasSuffix(n, "-recreate") && !o.started[n]
					if start {
						o.started[n] = true
						o.workers.Add(1)
					}
					o.mu.Unlock()
					if start {
						go o.work(n)
					}
				}
			}
			select {
			case <-o.ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
}

// work processes one lane until it is deleted or the check stops. A lane
// of the same name created again later (a return to an earlier partition
// count) gets a worker of its own.
func (o *orderCheck) work(lane string) {
	defer o.workers.Done()
	defer func() {
		o.mu.Lock()
		delete(o.started, lane)
		o.mu.Unlock()
	}()
	var c jetstream.Consumer
	for {
		var err error
		if c, err = o.js.Consumer(o.ctx, o.stream, lane); err == nil {
			break
		}
		if o.ctx.Err() != nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // a new lane in a cluster may not answer at once
	}
	for o.ctx.Err() == nil {
		b, err := c.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return
			}
			continue
		}
		for m := range b.Messages() {
			where := lane
			if md, err := m.Metadata(); err == nil {
				where = fmt.Sprintf("%s seq %d delivery %d", lane, md.Sequence.Stream, md.NumDelivered)
			}
			o.check(where, string(m.Data()))
			for m.DoubleAck(o.ctx) != nil && o.ctx.Err() == nil {
			}
		}
		if err := b.Error(); errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return
		}
	}
}

func (o *orderCheck) check(lane, body string) {
	key, num, _ := strings.Cut(body, " ")
	n, _ := strconv.Atoi(num)
	o.mu.Lock()
	defer o.mu.Unlock()
	if last := o.seen[key]; n != last+1 {
		o.violations = append(o.violations, fmt.Sprintf("%s: key %s got %d after %d (from %s)", lane, key, n, last, o.lastFrom[key]))
	}
	o.lastFrom[key] = lane
	if n > o.seen[key] {
		o.seen[key] = n
	}
	o.processed.Add(1)
}

// waitAllProcessed waits until every published message was processed.
func (o *orderCheck) waitAllProcessed(within time.Duration) {
	o.t.Helper()
	deadline := time.Now().Add(within)
	eventually(o.t, within+time.Second, "every published message to be processed", func() bool {
		if time.Now().After(deadline) {
			o.dump()
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		for k, n := range o.published {
			if o.seen[k] != n {
				return false
			}
		}
		return true
	})
}

// assertInOrder fails on any violation, and on any message not processed.
func (o *orderCheck) assertInOrder() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	total := 0
	for k, n := range o.published {
		total += n
		if o.seen[k] != n {
			o.t.Errorf("key %s: %d published, last processed %d (lost)", k, n, o.seen[k])
		}
	}
	if len(o.violations) > 0 {
		o.t.Fatalf("%d per-key order violations, first: %v", len(o.violations), o.violations[:min(5, len(o.violations))])
	}
	o.t.Logf("%d messages over %d keys, all processed once, in order", total, len(o.published))
}

func (o *orderCheck) dump() {
	o.mu.Lock()
	for k, n := range o.published {
		if o.seen[k] != n {
			o.t.Logf("key %s published %d seen %d", k, n, o.seen[k])
		}
	}
	o.t.Logf("workers started for %v, processed %d, violations %d", o.started, o.processed.Load(), len(o.violations))
	o.mu.Unlock()
	s, err := o.js.Stream(context.Background(), o.stream)
	if err != nil {
		o.t.Logf("stream: %v", err)
		return
	}
	for ci := range s.ListConsumers(context.Background()).Info() {
		o.t.Logf("%s pending=%d ackpending=%d waiting=%d paused=%v delivered=%d", ci.Name, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.Paused, ci.Delivered.Stream)
	}
}
