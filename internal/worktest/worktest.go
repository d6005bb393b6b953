// Package worktest holds what the tests and benchmarks of lanes work
// share: a worker run until the test ends, a connection as the commands
// make one (run.go); a backlog on a fresh design, a drain of it by a
// Worker, figures. Tests only.
package worktest

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// Span records the first and the last of n events; Rate is the events
// between them per second, so start-up costs are left out on both sides.
// With Total set, it also records when the tenth and the ninth tenth of
// the events came, for Middle.
type Span struct {
	Total       int64
	n           atomic.Int64
	first, last atomic.Int64
	t10, t90    atomic.Int64
}

func (s *Span) Tick() int64 {
	now := time.Now().UnixNano()
	s.first.CompareAndSwap(0, now)
	s.last.Store(now)
	n := s.n.Add(1)
	switch n {
	case s.Total / 10:
		s.t10.Store(now)
	case s.Total - s.Total/10:
		s.t90.Store(now)
	}
	return n
}

func (s *Span) Rate() float64 {
	return float64(s.n.Load()-1) / (time.Duration(s.last.Load() - s.first.Load())).Seconds()
}

// Middle is the events per second from the tenth event in ten to the
// ninth: a drain's steady state, without the lanes' start (which a few
// messages may already overlap) and the tail of the lanes ending last.
// 0 when the span is too short to have both marks.
func (s *Span) Middle() float64 {
	t10, t90 := s.t10.Load(), s.t90.Load()
	if t10 == 0 || t90 <= t10 {
		return 0
	}
	n := s.Total - s.Total/10 - s.Total/10
	return float64(n) / time.Duration(t90-t10).Seconds()
}

// Rates is a drain's messages per second: from its first message to its
// last (Full), and over its middle eight tenths (Middle, see Span).
type Rates struct{ Full, Middle float64 }

func (s *Span) Rates() Rates { return Rates{s.Rate(), s.Middle()} }

// Backlog creates a design with lanes lanes and stores perLane messages in
// each, and returns its plan.
func Backlog(b *testing.B, js jetstream.JetStream, name string, lanes, perLane int, edit ...func(*planner.Design)) *planner.Plan {
	b.Helper()
	p := testutil.Plan(b, name, lanes, edit...)
	natstest.CreateLanes(b, js, p)
	var subjects []string
	keys := make([][]string, lanes)
	for l := range lanes {
		keys[l] = natstest.SubjectsFor(b, p, l, 4)
	}
	for i := 0; i < perLane; i++ {
		for l := range lanes {
			subjects = append(subjects, keys[l][i%4])
		}
	}
	natstest.PublishAsync(b, js, subjects...)
	for _, l := range p.Lanes {
		natstest.WaitPending(b, js, p.Stream.Name, l.Name, uint64(perLane))
	}
	return p
}

// DropStream deletes a stream.
func DropStream(b *testing.B, js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil {
		b.Fatal(err)
	}
}

// Drain drains the same backlog with a Worker running inner (nil:
// a no-op handler) and returns messages per second.
func Drain(b *testing.B, url string, p *planner.Plan, total int, inner work.Handler) float64 {
	return DrainRates(b, url, p, total, inner).Full
}

// DrainRates is Drain with its steady state too.
func DrainRates(b *testing.B, url string, p *planner.Plan, total int, inner work.Handler) Rates {
	sp := Span{Total: int64(total)}
	done := make(chan struct{})
	h := work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
		if inner != nil {
			if err := inner.Handle(ctx, m); err != nil {
				return err
			}
		}
		if sp.Tick() == int64(total) {
			close(done)
		}
		return nil
	})
	RunUntil(b, url, p, h, done)
	return sp.Rates()
}

// Median is the middle of v.
func Median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// RunUntil runs a Worker with handler h on p's lanes until done is closed
// (5 minutes at most), then stops it.
func RunUntil(b *testing.B, url string, p *planner.Plan, h work.Handler, done <-chan struct{}) {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	w, err := work.New(js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "bench"}, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	select {
	case <-done:
	case err := <-ended:
		b.Fatalf("worker ended: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("not drained in 5 minutes")
	}
	cancel()
	if err := <-ended; err != nil {
		b.Fatal(err)
	}
}

// DrainConsume drains p's backlog (perLane messages on each lane) with
// nats.go's Consume, one per lane on js's connection, acks fire and
// forget, and returns messages per second: the standing-pull loop
// orbit.go's pcgroups runs for each member of a static group (500
// messages asked at a time), which the runtime's drain is held against.
func DrainConsume(b *testing.B, js jetstream.JetStream, p *planner.Plan, perLane int) float64 {
	return DrainConsumeRates(b, js, p, perLane).Full
}

// DrainConsumeRates is DrainConsume with its steady state too.
func DrainConsumeRates(b *testing.B, js jetstream.JetStream, p *planner.Plan, perLane int) Rates {
	total := int64(perLane * len(p.Lanes))
	sp := Span{Total: total}
	done := make(chan struct{})
	for _, l := range p.Lanes {
		c, err := js.Consumer(context.Background(), p.Stream.Name, l.Name)
		if err != nil {
			b.Fatal(err)
		}
		cc, err := c.Consume(func(m jetstream.Msg) {
			if err := m.Ack(); err != nil {
				b.Error(err)
			}
			if sp.Tick() == total {
				close(done)
			}
		}, jetstream.PullMaxMessages(500))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Stop()
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("Consume loop: not drained in 5 minutes")
	}
	return sp.Rates()
}
