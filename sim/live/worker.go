package live

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/clock"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// headerMsg carries a message's index in the workload (0-based).
const headerMsg = "Lanes-Sim-Msg"

// worker is one worker slot on a lane. It pulls one message at a time;
// when an injected crash kills it, a replacement with a new pull
// subscription takes its place in the same slot. Its connection may be
// shared with other workers (see openConns): a crash drops the worker's
// subscription and its unacknowledged message, as a dead process would.
type worker struct {
	r     *strategyRun
	lane  lane
	conn  *connect.Conn
	ready chan<- struct{}    // signalled once, when the first life can pull
	held  *heldMsg           // test-only fault, see Options.hold
	clock *clock.Clock       // the work timer, see sleep
	kv    jetstream.KeyValue // the lease bucket on conn (lease mechanics)
}

type heldMsg struct{ msg, attempt int }

// outcome is how handling one delivery ended for the worker.
type outcome int

const (
	handled outcome = iota
	crashed         // the worker died: its connection must go
	stopped         // the run is over
)

// run lives, dies and is replaced until the run stops.
func (wk *worker) run(ctx context.Context) error {
	defer func() {
		if wk.clock != nil {
			wk.clock.Close()
		}
	}()
	for {
		died, err := wk.life(ctx)
		if err != nil || !died {
			return err
		}
	}
}

// life is one subscription's lifetime: pull, work, ack, until the run
// stops (false) or an injected crash kills the worker (true).
func (wk *worker) life(ctx context.Context) (died bool, err error) {
	it, err := wk.subscribe(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	defer it.Stop()
	// Stopping the iterator is what wakes a worker blocked in Next.
	unhook := context.AfterFunc(ctx, it.Stop)
	defer unhook()

	if wk.ready != nil {
		wk.ready <- struct{}{}
		wk.ready = nil
		select {
		case <-wk.r.started:
		case <-ctx.Done():
			return false, nil
		}
	}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("worker on %s: %w", wk.lane.name, err)
		}
		out, err := wk.handle(ctx, m)
		switch {
		case err != nil:
			return false, err
		case out == crashed:
			return true, nil
		case out == stopped:
			return false, nil
		}
	}
}

// subscribe opens the worker's pull iterator. It asks for one message at a
// time (a batch above max ack pending is refused) and only when Next is
// called, so a busy worker never has a message waiting in its buffer that
// another worker could have run.
func (wk *worker) subscribe(ctx context.Context) (jetstream.MessagesContext, error) {
	c := wk.conn
	octx, cancel := c.Ctx(ctx)
	defer cancel()
	cons, err := c.JS.Consumer(octx, wk.r.box.stream, wk.lane.name)
	if err != nil {
		return nil, fmt.Errorf("worker on %s: %w", wk.lane.name, c.Classify(octx, err))
	}
	opts := []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(1), jetstream.WithMessagesErrOnMissingHeartbeat(false)}
	if wk.lane.group != "" {
		opts = append(opts, jetstream.PullPriorityGroup(wk.lane.group))
	}
	it, err := cons.Messages(opts...)
	if err != nil {
		return nil, fmt.Errorf("worker on %s: %w", wk.lane.name, err)
	}
	return it, nil
}

// handle runs one delivery, and the test-only hold fault.
func (wk *worker) handle(ctx context.Context, m jetstream.Msg) (outcome, error) {
	r := wk.r
	idx, attempt, err := r.identify(m)
	if err != nil {
		return stopped, err
	}
	if r.strategy.Live == strategy.Lease {
		return wk.leased(ctx, m, idx, attempt)
	}
	if wk.held == nil && r.o.hold != nil && r.o.hold(idx) {
		// Acked unprocessed, so the lane moves on; counted as in flight
		// so the run does not end while it is held.
		_ = m.Ack()
		r.inflight.Add(1)
		wk.held = &heldMsg{idx, attempt}
		return handled, nil
	}
	out := wk.execute(ctx, m, idx, attempt)
	if h := wk.held; h != nil && out == handled && r.w.Prev(idx) == h.msg {
		wk.held = nil
		out = wk.execute(ctx, nil, h.msg, h.attempt)
		r.inflight.Add(-1)
	}
	return out, nil
}

// identify reads the message index (header) and the attempt number (the
// delivery count from the message metadata).
func (r *strategyRun) identify(m jetstream.Msg) (idx, attempt int, err error) {
	idx, err = strconv.Atoi(m.Headers().Get(headerMsg))
	if err != nil || idx < 0 || idx >= len(r.done) {
		return 0, 0, fmt.Errorf("message %q on %s has no valid %s header", m.Subject(), r.box.stream, headerMsg)
	}
	md, err := m.Metadata()
	if err != nil {
		return 0, 0, fmt.Errorf("message %q on %s: %w", m.Subject(), r.box.stream, err)
	}
	return idx, int(md.NumDelivered), nil
}

// execute works on one attempt as the workload decides it: Begin on
// receipt, work (sleep), then either die at the crash point without an ack,
// or apply the side effect (End Done) and only then ack. m is nil for a
// message that was acked before it ran (the hold fault).
func (wk *worker) execute(ctx context.Context, m jetstream.Msg, idx, attempt int) outcome {
	r := wk.r
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	work, crash := r.w.Attempt(idx, attempt)
	e := r.rec.Begin(idx, wk.lane.index, r.now())
	if !wk.work(ctx, m, work, nil) {
		return stopped // interrupted: the execution stays open, as it was
	}
	if crash {
		r.rec.End(e, r.now(), judge.Crashed)
		return crashed
	}
	r.rec.End(e, r.now(), judge.Done)
	r.markDone(idx)
	if m != nil {
		// A lost ack means a redelivery, which the Recorder counts as a
		// duplicate: exactly what happens in production, so no retry here.
		_ = m.Ack()
	}
	return handled
}

// work sleeps for d, sending +WPI every ack wait / 3 when in-progress acks
// are on (and calling renew, when set, with them: every third of the
// shorter of the ack wait and the lease TTL). It returns false if the run
// stopped first.
func (wk *worker) work(ctx context.Context, m jetstream.Msg, d time.Duration, renew func()) bool {
	progress := wk.r.o.InProgress && m != nil
	every := d
	if progress {
		every = max(wk.r.ackWait/3, time.Millisecond)
		if renew != nil {
			every = wk.r.leaseTick()
		}
	}
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if wk.clock == nil {
			wk.clock = clock.New()
		}
		if !sleep(ctx, wk.clock, min(left, every)) {
			return false
		}
		if progress && time.Until(end) > 0 {
			_ = m.InProgress() // a lost one shows up as a redelivery
			if renew != nil {
				renew()
			}
		}
	}
}
