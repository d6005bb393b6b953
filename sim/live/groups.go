package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/clock"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/work"
)

// The lanes strategy's workers are the work package's, the runtime lanes
// work ships, so that what is measured is what is shipped. A worker group
// is the i-th worker of every lane: one work.Worker, in a membership bucket
// of its own, so that it serves every lane (in one shared bucket the
// instances would split the lanes between them, and a lane would have one
// worker, not W). Each lane therefore has one pull waiting per group, as
// it has one per worker with the plain pull workers.
//
// Through work's public API: the handler runs the workload's attempt and
// reports it to the Recorder; returning nil acks (a confirmed ack, before
// the lane's next message). A crash returns work.RetryAfter with what is
// left of the message's ack deadline, so the server redelivers it when it
// would redeliver a dead worker's message, and the group takes the lane's
// next message at once, as a replacement would. Without --in-progress the
// groups run with work.Config.NoProgressAcks.

// maxGroups bounds the groups: one connection, one bucket and one goroutine
// per lane each.
const maxGroups = planner.MaxLiveConnections

// errCrashed is the error a crashed attempt hands back to work.
var errCrashed = errors.New("simulated crash")

// groupsFit: work serves serial lanes (max ack pending 1) and
// key-parallel lanes (max ack pending K with keys in flight K, whose
// owner gates the keys), with up to maxGroups groups. Two messages of a
// plain lane of max ack pending above 1 could run out of order: work
// does not serve it.
func groupsFit(workersPerLane int, sh strategy.Shape) bool {
	return (sh.MaxAckPending == 1 || sh.KeyParallel()) && workersPerLane <= maxGroups
}

// ErrRefused: lanes work started and refused to serve the run's lanes
// (its Stats count them), so the run cannot go on.
var ErrRefused = errors.New("lanes work refused to serve the lanes")

// group is one work.Worker and its handler's state.
type group struct {
	r      *strategyRun
	index  int
	bucket string
	worker atomic.Pointer[work.Worker] // once made
	// clocks are the handlers' timers, one per handler running at once
	// (a key-parallel lane runs up to K).
	clocks chan *clock.Clock
	mu     sync.Mutex
	held   []*heldMsg // per lane: the test-only hold fault
}

// startGroups starts one work.Worker per group; the returned channel is
// closed once every lane has a pull waiting from every group.
func (r *strategyRun) startGroups(ctx context.Context, wg *sync.WaitGroup, fail func(error)) <-chan struct{} {
	n := r.lanes[0].workers
	for i := range n {
		g := &group{r: r, index: i, bucket: fmt.Sprintf("%s_W%d", r.box.stream, i+1),
			clocks: make(chan *clock.Clock, len(r.lanes)*max(1, r.keysInFlight)), held: make([]*heldMsg, len(r.lanes))}
		r.groups = append(r.groups, g)
		r.box.buckets = append(r.box.buckets, g.bucket)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.close()
			if err := g.run(ctx, r.conns[i%len(r.conns)].JS); err != nil {
				fail(err)
			}
		}()
	}
	ready := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.waitPulls(ctx, n); err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		close(ready)
	}()
	return ready
}

// waitPulls polls the server until every lane has n pulls waiting. When
// a group's work.Worker refuses lanes, no pull will come: it returns
// ErrRefused.
func (r *strategyRun) waitPulls(ctx context.Context, n int) error {
	for {
		if err := r.refused(); err != nil {
			return err
		}
		l, err := r.api.List(ctx, r.box.stream)
		if err != nil {
			return err
		}
		ready := len(l.Consumers) == len(r.lanes)
		for _, c := range l.Consumers {
			ready = ready && c.NumWaiting >= n
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// refused is ErrRefused, with what was refused, when a group's worker
// has refused lanes.
func (r *strategyRun) refused() error {
	for _, g := range r.groups {
		if w := g.worker.Load(); w != nil {
			if st := w.Stats(); st.Refused > 0 {
				return fmt.Errorf("%w: %d of %d (max ack pending %d, keys in flight %d); this lanes work does not serve them",
					ErrRefused, st.Refused, st.Refused+st.Lanes, r.lane0.MaxAckPending, max(1, r.keysInFlight))
			}
		}
	}
	return nil
}

func (g *group) run(ctx context.Context, js jetstream.JetStream) error {
	r := g.r
	cfg := work.Config{Stream: r.box.stream, Design: r.box.plan.Design.Name, Instance: "sim-" + strconv.Itoa(g.index+1),
		Bucket: g.bucket, NoProgressAcks: !r.o.InProgress, Timeout: timeoutOf(r.workerCO)}
	w, err := work.New(js, cfg, g)
	if err != nil {
		return err
	}
	g.worker.Store(w)
	// Stop at once when the run ends: a handler in the middle of a message
	// stops there, as the plain workers do.
	defer context.AfterFunc(ctx, w.Abort)()
	err = w.Run(ctx)
	if errors.Is(err, work.ErrAborted) || errors.Is(err, work.ErrGraceExpired) || ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("stopped before the run ended")
	}
	return fmt.Errorf("worker group %d: %w", g.index+1, err)
}

func (g *group) close() {
	for {
		select {
		case c := <-g.clocks:
			c.Close()
		default:
			return
		}
	}
}

// clock takes a handler's timer; put gives it back.
func (g *group) clock() *clock.Clock {
	select {
	case c := <-g.clocks:
		return c
	default:
		return clock.New()
	}
}

func (g *group) put(c *clock.Clock) {
	select {
	case g.clocks <- c:
	default:
		c.Close()
	}
}

// Handle is the group's work.Handler: one attempt of one message, and the
// test-only hold fault (see Options.hold).
func (g *group) Handle(ctx context.Context, m *work.Msg) error {
	r := g.r
	select {
	case <-r.started: // the backlog is published before the clock starts
	case <-ctx.Done():
		return ctx.Err()
	}
	idx, err := strconv.Atoi(m.Header.Get(headerMsg))
	if err != nil || idx < 0 || idx >= len(r.done) || m.Partition < 0 || m.Partition >= len(g.held) {
		return work.Term(fmt.Errorf("message %q on %s has no valid %s header", m.Subject, r.box.stream, headerMsg))
	}
	lane := m.Partition
	if r.o.hold != nil && g.hold(lane, idx, m.Attempt) {
		return nil // acked unprocessed, so the lane moves on
	}
	if err := g.execute(ctx, lane, idx, m.Attempt); err != nil {
		return err
	}
	if h := g.release(lane, idx); h != nil {
		defer r.inflight.Add(-1)
		return g.execute(ctx, lane, h.msg, h.attempt)
	}
	return nil
}

// hold takes message idx aside when the hold fault asks for it and the
// lane holds nothing yet; it is counted as in flight so that the run
// does not end while it is held.
func (g *group) hold(lane, idx, attempt int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[lane] != nil || !g.r.o.hold(idx) {
		return false
	}
	g.r.inflight.Add(1)
	g.held[lane] = &heldMsg{idx, attempt}
	return true
}

// release gives back the message held on lane once its successor idx
// has run.
func (g *group) release(lane, idx int) *heldMsg {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.held[lane]
	if h == nil || g.r.w.Prev(idx) != h.msg {
		return nil
	}
	g.held[lane] = nil
	return h
}

// execute works on one attempt as the workload decides it: Begin, work,
// then either die at the crash point or apply the side effect (End Done);
// work acks after the handler returns nil.
func (g *group) execute(ctx context.Context, lane, idx, attempt int) error {
	r := g.r
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	d, crash := r.w.Attempt(idx, attempt)
	e := r.rec.Begin(idx, lane, r.now())
	c := g.clock()
	defer g.put(c)
	if !sleep(ctx, c, d) {
		return ctx.Err() // interrupted: the execution stays open, as it was
	}
	if crash {
		r.rec.End(e, r.now(), judge.Crashed)
		return work.RetryAfter(max(r.crashDeadline(d, attempt)-d, 0), errCrashed)
	}
	r.rec.End(e, r.now(), judge.Done)
	r.markDone(idx)
	return nil
}

// crashDeadline is when, after its delivery, the server would redeliver a
// message whose worker died after working d: one ack deadline after the
// delivery, or after the last in-progress ack (every ack wait / 3), as
// the model has it.
func (r *strategyRun) crashDeadline(d time.Duration, attempt int) time.Duration {
	wait := r.ackWaitOf(attempt)
	if every := r.ackWait / 3; r.o.InProgress && every > 0 && every < wait {
		last := time.Duration(0)
		if d > 0 {
			last = (d - 1) / every * every
		}
		return last + wait
	}
	return wait
}

// sleep stands for d of work on c, in slices so that the end of the run is
// noticed within a slice; false if the run stopped first.
func sleep(ctx context.Context, c *clock.Clock, d time.Duration) bool {
	const slice = 20 * time.Millisecond
	end := time.Now().Add(d)
	for {
		if ctx.Err() != nil {
			return false
		}
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		c.Sleep(min(left, slice))
	}
}
