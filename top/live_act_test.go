package top_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/top"
	"github.com/lanes-dev/lanes/work"
)

// liveSetup is a real server with a design of two lanes, a dead-letter
// stream, and a view on it.
type liveSetup struct {
	js   jetstream.JetStream
	p    *planner.Plan
	conn *connect.Conn
	ctx  context.Context
	lane string // lane 0
	m    *top.Model
}

func newLiveSetup(t *testing.T) *liveSetup {
	t.Helper()
	srv := natstest.Start(t)
	s := &liveSetup{}
	_, s.js = natstest.Connect(t, srv.URL())
	s.p = testutil.Plan(t, "orders", 2)
	natstest.CreateLanes(t, s.js, s.p)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.ctx = ctx
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	conn, err := connect.Open(ctx, connect.Options{Server: srv.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	s.conn, s.lane = conn, s.p.Consumers[0].Durable
	s.m = top.New(top.Config{Stream: s.p.Stream.Name, Design: "orders", Server: conn.Server, Every: time.Second, By: "tester@host (lanes top)",
		Styles: render.PlainStyles(), SkipWait: 45 * time.Second}, &top.Live{Conn: conn, Ctx: ctx})
	s.m.Update(tea.WindowSizeMsg{Width: 200, Height: 40})
	return s
}

func (s *liveSetup) read(t *testing.T) *health.Report {
	t.Helper()
	r, err := health.Inspect(s.ctx, s.conn, health.Options{Stream: s.p.Stream.Name, Design: s.p.Design.Name})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// publish n messages on each of lane 0's keys (k0, k1, ...), round
// robin; it returns their sequences, in order, and the keys.
func (s *liveSetup) publish(t *testing.T, keys, n int) ([]uint64, []string) {
	t.Helper()
	subjects := natstest.SubjectsFor(t, s.p, 0, keys)
	var seqs []uint64
	for i := range n {
		for _, subj := range subjects {
			ack, err := s.js.Publish(s.ctx, subj, fmt.Appendf(nil, "%s-%d", subj, i))
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ack.Sequence)
		}
	}
	var ks []string
	for _, subj := range subjects {
		ks = append(ks, subj[strings.LastIndex(subj, ".")+1:])
	}
	return seqs, ks
}

func (s *liveSetup) ackFloor(t *testing.T) uint64 {
	t.Helper()
	c, err := s.js.Consumer(s.ctx, s.p.Stream.Name, s.lane)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ci.AckFloor.Stream
}

// blocker is a handler that blocks on its poison messages until it is
// stopped (a skip cancels it) and records what it ran.
type blocker struct {
	mu      sync.Mutex
	poison  map[uint64]bool
	began   map[uint64]int
	stopped []error
}

func (b *blocker) handle(ctx context.Context, m *work.Msg) error {
	b.mu.Lock()
	b.began[m.Seq]++
	b.mu.Unlock()
	if !b.poison[m.Seq] {
		return nil
	}
	<-ctx.Done()
	b.mu.Lock()
	b.stopped = append(b.stopped, context.Cause(ctx))
	b.mu.Unlock()
	return ctx.Err()
}

func (b *blocker) count(seq uint64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.began[seq]
}

func startWorker(t *testing.T, s *liveSetup, name string, h work.Handler) {
	t.Helper()
	w, err := work.New(s.js, work.Config{Stream: s.p.Stream.Name, Design: s.p.Design.Name, Instance: name, DeadLetter: "dlq.orders",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
}

// TestTopSkipOnARealServer: a worker's handler blocks on lane 0's first
// two messages (two keys). The key lookup shows the key's last message
// waiting; x states the skip from its dry run (seq, subject, key, the
// instance that settles it) and changes nothing; y terminates it: the
// worker stops its handler and the status says so. Then p and y park the
// next head: the message is parked as by the user from lanes top, the
// lane moves on, and the lane view's parked pane shows it. (A skip
// recorded but not settled in time cannot be brought about reliably with
// a live worker, which settles at once: TestTopSkipConfirm shows it with
// actions.SkipPendingError.)
func TestTopSkipOnARealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a worker and skips")
	}
	s := newLiveSetup(t)
	seqs, keys := s.publish(t, 2, 3)
	first, second := seqs[0], seqs[1]
	b := &blocker{poison: map[uint64]bool{first: true, second: true}, began: map[uint64]int{}}
	startWorker(t, s, "w1", work.HandlerFunc(b.handle))
	testutil.WaitFor(t, "the worker runs the head", time.Minute, func() bool { return b.count(first) > 0 })
	headIs := func(seq uint64) *health.Report {
		var r *health.Report
		testutil.WaitFor(t, fmt.Sprintf("the report shows w1 serving the lane, seq %d its head", seq), time.Minute, func() bool {
			r = s.read(t)
			l := r.Lane(s.lane)
			return l.Server != nil && l.Server.Instance == "w1" && l.Head != nil && l.Head.Seq == seq
		})
		return r
	}
	turn(s.m, headIs(first))
	press(t, s.m, "/", "lane:"+s.lane, "enter")

	// The key of the stuck head: its last message (seqs[4]) waits.
	press(t, s.m, "l", keys[0], "enter")
	lacks(t, "key position", s.m.View(), "Lane "+s.lane, fmt.Sprintf("last      lane %s: seq %d, stored ", s.lane, seqs[4]),
		fmt.Sprintf("waiting (the ack floor is seq %d); the head is seq %d, key %s", first-1, first, keys[0]))

	press(t, s.m, "x")
	lacks(t, "skip confirmation", s.m.View(), fmt.Sprintf("Skip seq %d of lane %s (stream ORDERS)?", first, s.lane), "key "+keys[0]+" (serial lane: the lane's head)",
		"( ) p: park it on dlq.orders", "done by   w1, the lanes work instance serving the lane", "asked by  tester@host (lanes top)")
	if b.count(second) != 0 || s.ackFloor(t) >= first {
		t.Fatalf("the dry run moved the lane")
	}
	press(t, s.m, "y")
	lacks(t, "skip outcome", s.m.View(), fmt.Sprintf("skip: seq %d of lane %s terminated by w1", first, s.lane))

	// The next head, parked.
	turn(s.m, headIs(second))
	press(t, s.m, "x", "p")
	lacks(t, "park chosen", s.m.View(), fmt.Sprintf("Skip seq %d of lane %s", second, s.lane), "(*) p: park it on dlq.orders", fmt.Sprintf("y: park seq %d", second))
	press(t, s.m, "y")
	lacks(t, "skip outcome", s.m.View(), fmt.Sprintf("skip: seq %d of lane %s parked on dlq.orders by w1", second, s.lane))
	testutil.WaitFor(t, "the lane moved on", time.Minute, func() bool { return s.ackFloor(t) == seqs[len(seqs)-1] })
	b.mu.Lock()
	if len(b.stopped) != 2 || !errors.Is(b.stopped[0], work.ErrSkipped) || !errors.Is(b.stopped[1], work.ErrSkipped) {
		t.Errorf("the handlers were stopped by %v, want two skips", b.stopped)
	}
	if b.began[first] != 1 || b.began[second] != 1 {
		t.Errorf("the skipped messages began %d and %d times, want once each", b.began[first], b.began[second])
	}
	b.mu.Unlock()

	// The lane view's parked pane: the parked message, from this lane
	// (esc: from the key's lane view to the list, enter: the lane again).
	press(t, s.m, "esc", "enter")
	testutil.WaitFor(t, "the parked pane shows it", time.Minute, func() bool {
		turn(s.m, s.read(t))
		return strings.Contains(s.m.View(), fmt.Sprintf("seq 1 (was %d), key %s, ", second, keys[1]))
	})
	lacks(t, "parked pane", s.m.View(), "parked    1 message from this lane on dlq.orders (stream DLQ):", "skipped by tester@host (lanes top)")
	press(t, s.m, "l", keys[0], "enter")
	lacks(t, "key done", s.m.View(), fmt.Sprintf("seq %d, stored ", seqs[4]), fmt.Sprintf("done (the ack floor is seq %d)", seqs[len(seqs)-1]))
}

// TestTopRewindOnARealServer: lane 0 ran its messages (acked); r and a
// sequence show the rewind's dry run (ack floor now, restart point,
// messages that run again) and change nothing; y rewinds the lane with
// actions.Rewind: the messages from the point are delivered again.
func TestTopRewindOnARealServer(t *testing.T) {
	s := newLiveSetup(t)
	seqs, _ := s.publish(t, 2, 3)
	natstest.Fetch(t, s.js, s.p.Stream.Name, s.lane, len(seqs), true)
	if f := s.ackFloor(t); f != seqs[len(seqs)-1] {
		t.Fatalf("ack floor %d after the fetch, want %d", f, seqs[len(seqs)-1])
	}
	turn(s.m, s.read(t))
	press(t, s.m, "/", "lane:"+s.lane, "enter", "r", fmt.Sprint(seqs[2]), "enter")
	frame := s.m.View()
	lacks(t, "rewind confirmation", frame, fmt.Sprintf("Rewind lane %s of stream ORDERS to seq %d?", s.lane, seqs[2]),
		fmt.Sprintf("%s: ack floor %d, delivered %d -> restarts at seq %d (ack floor %d), 4 messages again", s.lane, seqs[5], seqs[5], seqs[2], seqs[2]-1))
	if f := s.ackFloor(t); f != seqs[len(seqs)-1] {
		t.Fatalf("the dry run moved the lane to %d", f)
	}
	// From the lane view, whose parked pane says no dead-letter subject
	// is known (no worker names one).
	press(t, s.m, "n", "enter")
	lacks(t, "lane view", s.m.View(), "Lane "+s.lane, "parked    none known: no dead-letter subject is known for design \"orders\"")
	press(t, s.m, "r", fmt.Sprint(seqs[2]), "enter")
	press(t, s.m, "y")
	lacks(t, "rewind outcome", s.m.View(), fmt.Sprintf("rewind: 1 lane rewound to seq %d (%s); 4 messages run again", seqs[2], s.lane))
	if f := s.ackFloor(t); f != seqs[2]-1 {
		t.Errorf("ack floor %d after the rewind, want %d", f, seqs[2]-1)
	}
	again := natstest.Fetch(t, s.js, s.p.Stream.Name, s.lane, len(seqs), true)
	if len(again) != 4 {
		t.Fatalf("%d messages delivered again, want 4", len(again))
	}
	if md, _ := again[0].Metadata(); md.Sequence.Stream != seqs[2] {
		t.Errorf("first delivered again: seq %d, want %d", md.Sequence.Stream, seqs[2])
	}
	if r := s.read(t); r.Summary.Paused != 0 {
		t.Errorf("%d lanes left paused by the rewind", r.Summary.Paused)
	}
}
