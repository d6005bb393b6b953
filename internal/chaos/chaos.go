// Package chaos checks per-key order end to end while lanes apply is
// pushed around: a publisher numbers every key's messages, a worker per
// lane (of any generation, started as lanes appear) processes them, and a
// checker classifies every delivery. The chaos tests (commands/chaos_test.go)
// drive apply meanwhile: returns to earlier partition counts, two applies
// at once, kill -9, server restarts.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Checker publishes numbered messages per key and processes them with one
// worker per lane, recording what each delivery was.
type Checker struct {
	js      jetstream.JetStream
	stream  string
	design  string
	subject string // publish subject with one '*' for the key
	keys    []string

	mu        sync.Mutex
	published map[string]int // key -> messages published (and acknowledged by the stream)
	seen      map[string]int // key -> highest number processed
	last      map[string]string
	counts    Counts
	samples   []string
	workers   map[string]bool

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	pub  sync.WaitGroup
}

// Counts is what the checker saw.
type Counts struct {
	Published int
	Processed int // deliveries that were the key's next message
	// Repeated: the key's last processed message delivered again right
	// after it (its ack was lost: in flight at a kill, a restart, a
	// recreate). Allowed, and counted.
	Repeated int
	// Replayed: an older message of the key than its last: a lane started
	// before what earlier lanes processed. Never allowed.
	Replayed int
	// Skipped: a message after a gap in the key's numbers: one was lost or
	// is processed out of order. Never allowed.
	Skipped int
	// Lost: published but never processed (counted at the end).
	Lost int
}

// New makes a checker for a design's stream; subject is the publish
// pattern with one '*' (e.g. chaos.in.*).
func New(js jetstream.JetStream, stream, design, subject string, keys int) *Checker {
	c := &Checker{js: js, stream: stream, design: design, subject: subject,
		published: map[string]int{}, seen: map[string]int{}, last: map[string]string{}, workers: map[string]bool{}}
	for i := 0; i < keys; i++ {
		c.keys = append(c.keys, fmt.Sprintf("k%03d", i))
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c
}

// Close stops the publisher and the workers.
func (c *Checker) Close() {
	c.stop()
	c.pub.Wait()
	c.wg.Wait()
}

// Publish sends n messages round-robin over the keys; each is retried
// (same message ID: the stream drops a duplicate) until the stream
// acknowledges it, across server restarts.
func (c *Checker) Publish(n int) {
	for i := 0; i < n && c.ctx.Err() == nil; i++ {
		c.publishOne(c.keys[i%len(c.keys)])
	}
}

func (c *Checker) publishOne(key string) {
	c.mu.Lock()
	n := c.published[key] + 1
	c.mu.Unlock()
	body := key + " " + strconv.Itoa(n)
	subject := strings.Replace(c.subject, "*", key, 1)
	for c.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		_, err := c.js.Publish(ctx, subject, []byte(body), jetstream.WithMsgID(c.stream+" "+body))
		cancel()
		if err == nil {
			c.mu.Lock()
			c.published[key] = n
			c.counts.Published++
			c.mu.Unlock()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PublishInBackground publishes about rate messages a second until the
// returned stop is called (stop waits for the publish in progress).
func (c *Checker) PublishInBackground(rate int) (stop func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	c.pub.Add(1)
	go func() {
		defer c.pub.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			c.publishOne(c.keys[i%len(c.keys)])
		}
	}()
	return func() { cancel(); c.pub.Wait() }
}

// Work starts a worker for every lane of the design as it appears (a lane
// deleted and created again gets a new worker).
func (c *Checker) Work() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for c.ctx.Err() == nil {
			if s, err := c.js.Stream(c.ctx, c.stream); err == nil {
				names := s.ConsumerNames(c.ctx)
				for n := range names.Name() {
					if !strings.HasPrefix(n, c.design+"-n") || strings.HasSuffix(n, "-recreate") {
						continue
					}
					c.mu.Lock()
					start := !c.workers[n]
					c.workers[n] = true
					c.mu.Unlock()
					if start {
						c.wg.Add(1)
						go c.work(n)
					}
				}
			}
			select {
			case <-c.ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

// work processes one lane until it is gone: one message at a time, acked
// and confirmed before the next (the lane allows one out anyway). Pulls go
// to the lane by name, so one handle serves a lane deleted and created
// again at once (a recreate).
func (c *Checker) work(lane string) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		delete(c.workers, lane)
		c.mu.Unlock()
	}()
	var cons jetstream.Consumer
	gone := 0
	for c.ctx.Err() == nil && gone < 20 {
		if cons == nil {
			var err error
			if cons, err = c.js.Consumer(c.ctx, c.stream, lane); err != nil {
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					gone++
				}
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		n := 0
		for m := range b.Messages() {
			n++
			c.deliver(lane, m)
			ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			m.DoubleAck(ctx) // a lost ack makes the message come again: a repeat
			cancel()
		}
		if err := b.Error(); errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons = nil // look again: gone for good, or created again
			gone++
		} else if n > 0 {
			gone = 0
		}
	}
}

func (c *Checker) deliver(lane string, m jetstream.Msg) {
	key, num, _ := strings.Cut(string(m.Data()), " ")
	n, _ := strconv.Atoi(num)
	where := lane
	if md, err := m.Metadata(); err == nil {
		where = fmt.Sprintf("%s seq %d delivery %d", lane, md.Sequence.Stream, md.NumDelivered)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.seen[key]
	switch {
	case n == last+1:
		c.counts.Processed++
		c.seen[key] = n
	case n == last:
		c.counts.Repeated++
	case n < last:
		c.counts.Replayed++
		c.sample(fmt.Sprintf("replay: key %s got %d after %d (%s; the last from %s)", key, n, last, where, c.last[key]))
	default:
		c.counts.Skipped++
		c.sample(fmt.Sprintf("gap: key %s got %d after %d (%s; the last from %s)", key, n, last, where, c.last[key]))
		c.seen[key] = n
	}
	c.last[key] = where
}

func (c *Checker) sample(s string) {
	if len(c.samples) < 10 {
		c.samples = append(c.samples, s)
	}
}

// WaitProcessed waits until every published message was processed, or
// the time is up.
func (c *Checker) WaitProcessed(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c.pending() == 0 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c.pending() == 0
}

func (c *Checker) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	left := 0
	for k, n := range c.published {
		left += max(n-c.seen[k], 0)
	}
	return left
}

// Counts returns what the checker saw so far; Lost counts what was
// published and not (yet) processed.
func (c *Checker) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	for k, n := range c.published {
		out.Lost += max(n-c.seen[k], 0)
	}
	return out
}

// Err describes every violation: a lost, replayed or skipped message.
func (c *Checker) Err() error {
	n := c.Counts()
	if n.Lost == 0 && n.Replayed == 0 && n.Skipped == 0 {
		return nil
	}
	c.mu.Lock()
	samples := slices.Clone(c.samples)
	var lost []string
	for k, p := range c.published {
		if c.seen[k] < p && len(lost) < 5 {
			lost = append(lost, fmt.Sprintf("%s: %d published, %d processed", k, p, c.seen[k]))
		}
	}
	c.mu.Unlock()
	return fmt.Errorf("%d lost, %d replayed, %d skipped (of %d published): %s %s", n.Lost, n.Replayed, n.Skipped, n.Published,
		strings.Join(samples, "; "), strings.Join(lost, "; "))
}

// Connect is a client connection for the publisher and the workers: it
// reconnects for as long as the test runs.
func Connect(urls string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
