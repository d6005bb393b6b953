package live

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// strategyRun is one strategy on its own stream: the shared state of the
// publisher, the workers and the supervisor.
type strategyRun struct {
	o        *Options
	strategy strategy.Strategy
	c        *connect.Conn        // control: setup, publishing, settle checks
	api      *jsapi.Client        // on c
	workerCO connect.Options      // how workers connect
	conns    []*connect.Conn      // the workers' connections, shared beyond MaxLiveConnections
	leases   []jetstream.KeyValue // the lease bucket on each of conns (lease mechanics)
	box      *sandbox
	lanes    []lane
	w        *workload.Workload
	rec      *judge.Recorder
	subjects []string      // per key, the published subject inside the sandbox
	ackWait  time.Duration // the shortest the server waits for an ack
	lane0    planner.ConsumerConfig
	// keysInFlight above 1: the lanes are key-parallel.
	keysInFlight int
	groups       []*group // the work mechanics' worker groups

	started   chan struct{} // closed when the clock starts
	start     time.Time
	done      []atomic.Bool // per message: completed at least once
	completed atomic.Int64
	inflight  atomic.Int64 // executions begun and not ended, plus held messages
}

// runStrategy sets up a sandbox, runs the strategy to the end (or until ctx
// is cancelled) and removes the sandbox unless Keep. It returns a result
// whenever the workers ran, even with an error.
func runStrategy(ctx context.Context, c *connect.Conn, workerCO connect.Options, o Options, id string, st strategy.Strategy, created *[]*sandbox) (res *judge.Result, err error) {
	box, err := newSandbox(o.Plan, id, st.Name, o.AckWait, !o.ServerGiven)
	if err != nil {
		return nil, err
	}
	defs, lanes := box.consumers(st, o.params())
	r := &strategyRun{o: &o, strategy: st, c: c, api: jsapi.New(c), workerCO: workerCO, box: box, lanes: lanes, w: o.Workload,
		started: make(chan struct{}), done: make([]atomic.Bool, len(o.Workload.Messages)),
		ackWait: shortestAckWait(defs[0].AckWait, defs[0].BackOff), lane0: defs[0], keysInFlight: st.Shape(o.params()).KeysInFlight}
	if r.rec, err = r.recorder(); err != nil {
		return nil, err
	}
	for _, subj := range o.Workload.Spec.Keys.Subjects {
		r.subjects = append(r.subjects, box.prefix+"."+subj)
	}
	// From here on the stream may exist: Run removes it at the end. The
	// hook must work after a cancellation, so it gets its own deadline.
	*created = append(*created, box)
	defer func() {
		if res != nil && o.BeforeCleanup != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			o.BeforeCleanup(cctx, c, st.Name, box.stream)
		}
	}()
	if err := box.create(ctx, r.api, defs); err != nil {
		return nil, err
	}
	err = r.run(ctx)
	if errors.Is(err, ErrRefused) {
		return nil, err // nothing ran: no result to show
	}
	if ctx.Err() != nil {
		r.rec.Interrupt()
	}
	result := r.rec.Result()
	r.report()
	return &result, err
}

// recorder judges the run, with the strategy's own recorder: its lanes are
// the strategy's consumers, as in the model.
func (r *strategyRun) recorder() (*judge.Recorder, error) {
	o, w := r.o, r.w
	keyLane := make([]int, len(w.Spec.Keys.Subjects))
	for k, subj := range w.Spec.Keys.Subjects {
		l, ok := o.Plan.LaneOf(subj)
		if !ok {
			return nil, fmt.Errorf("live simulation: key subject %q does not match the design's subject %s", subj, o.Plan.Design.Subject)
		}
		keyLane[k] = l.Partition
	}
	return r.strategy.Recorder(w, o.params(), keyLane), nil
}

// params are the strategy parameters of the run: the design's.
func (o *Options) params() strategy.Params {
	d := o.Plan.Design
	return strategy.Params{Partitions: len(o.Plan.Consumers), WorkersPerLane: o.WorkersPerLane,
		MaxAckPending: d.Lane.MaxAckPending, Pinned: d.Lane.Pinned, KeysInFlight: d.Lane.KeysInFlight}
}

// ackWaitOf is how long the server waits for the ack of a delivery
// (1-based): the backoff step when the lanes have one.
func (r *strategyRun) ackWaitOf(attempt int) time.Duration {
	return planner.AckDeadline(r.lane0.AckWait, r.lane0.BackOff, attempt)
}

// shortestAckWait is the shortest time the server waits for an ack: with
// BackOff, each redelivery has its own.
func shortestAckWait(ackWait time.Duration, backoff []time.Duration) time.Duration {
	for _, b := range backoff {
		ackWait = min(ackWait, b)
	}
	return ackWait
}

// run starts the workers and waits until they are all ready, publishes the
// backlog, starts the clock and the publisher of the rest, and supervises
// until the server has nothing more to deliver. Then it stops everything
// and waits for it.
func (r *strategyRun) run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop() // workers and publisher see the cancellation and leave
		wg.Wait()
		r.closeConns()
	}()

	errs := make(chan error, 1)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	ready, err := r.startMechanics(ctx, &wg, fail)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, ready, errs); err != nil {
		return err
	}

	pub, err := r.newPublisher()
	if err != nil {
		return err
	}
	r.report()
	if err := pub.send(ctx, r.backlog()); err != nil || ctx.Err() != nil {
		return cmp.Or(err, ctx.Err())
	}

	r.start = time.Now()
	close(r.started)
	published := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		published <- pub.send(ctx, len(r.w.Messages))
	}()
	return r.supervise(ctx, published, errs)
}

// startMechanics opens the workers' connections and starts the workers of the
// run's mechanics: the work package's groups (groups.go), or the pull
// workers (worker.go), with a lease bucket for the lease mechanics
// (lease.go). The channel is closed once they can all receive.
func (r *strategyRun) startMechanics(ctx context.Context, wg *sync.WaitGroup, fail func(error)) (<-chan struct{}, error) {
	if r.strategy.Live == strategy.Work {
		if err := r.openConns(ctx, r.lanes[0].workers); err != nil {
			return nil, err
		}
		return r.startGroups(ctx, wg, fail), nil
	}
	if err := r.openConns(ctx, r.totalWorkers()); err != nil {
		return nil, err
	}
	if r.strategy.Live == strategy.Lease {
		if err := r.openLeases(ctx); err != nil {
			return nil, err
		}
	}
	return r.startWorkers(ctx, wg, fail), nil
}

func (r *strategyRun) totalWorkers() int {
	total := 0
	for _, l := range r.lanes {
		total += l.workers
	}
	return total
}

// openConns opens the workers' connections: one per worker (or worker
// group) up to MaxLiveConnections, shared round-robin beyond (a thousand
// workers do not need a thousand connections, and the server should not
// see them), 32 being opened at a time.
func (r *strategyRun) openConns(ctx context.Context, workers int) error {
	r.conns = make([]*connect.Conn, min(workers, planner.MaxLiveConnections))
	co := r.workerCO
	co.Name = "lanes-simulate-worker"
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range r.conns {
		g.Go(func() error {
			octx, cancel := context.WithTimeout(gctx, timeoutOf(co))
			defer cancel()
			c, err := connect.Open(octx, co)
			if err != nil {
				return err
			}
			r.conns[i] = c
			return nil
		})
	}
	return g.Wait()
}

func (r *strategyRun) closeConns() {
	for _, c := range r.conns {
		if c != nil { // a failed opening leaves gaps
			c.Close()
		}
	}
}

// startWorkers starts every worker; each sends on ready once it can pull.
func (r *strategyRun) startWorkers(ctx context.Context, wg *sync.WaitGroup, fail func(error)) chan struct{} {
	total := r.totalWorkers()
	ready := make(chan struct{}, total)
	n := 0
	for _, l := range r.lanes {
		for i := 0; i < l.workers; i++ {
			wg.Add(1)
			conn := r.conns[n%len(r.conns)]
			var kv jetstream.KeyValue
			if r.leases != nil {
				kv = r.leases[n%len(r.leases)]
			}
			n++
			go func() {
				defer wg.Done()
				wk := &worker{r: r, lane: l, conn: conn, ready: ready, kv: kv}
				if err := wk.run(ctx); err != nil {
					fail(err)
				}
			}()
		}
	}
	return readyAfter(ctx, ready, total)
}

// readyAfter closes the returned channel after n sends on ready; it gives
// up when ctx ends (a worker failed, or the run was stopped).
func readyAfter(ctx context.Context, ready chan struct{}, n int) chan struct{} {
	all := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			select {
			case <-ready:
			case <-ctx.Done():
				return
			}
		}
		close(all)
	}()
	return all
}

func waitReady(ctx context.Context, ready <-chan struct{}, errs <-chan error) error {
	select {
	case <-ready:
		return nil
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Supervision timing: progress is reported every tick; once everything is
// published the server is asked whether anything is left to deliver, every
// tick when every message is done (duplicates may still be on their way),
// every settleSlow otherwise (messages can be waiting out an ack wait, or be
// dropped by max deliver). Two quiet answers in a row end the run: a
// redelivery sent just before a late ack shows up as in flight by then.
const (
	tick       = 50 * time.Millisecond
	settleSlow = 10 // ticks
)

func (r *strategyRun) supervise(ctx context.Context, published <-chan error, errs <-chan error) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	publishing, quiet, ticks := true, 0, 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case err := <-published:
			if err != nil {
				return err
			}
			publishing, published = false, nil
			continue
		case <-t.C:
		}
		r.report()
		ticks++
		if publishing || (int(r.completed.Load()) < len(r.done) && ticks%settleSlow != 0) {
			continue
		}
		ok, err := r.settled(ctx)
		if err != nil {
			return err
		}
		if !ok {
			quiet = 0
			continue
		}
		if quiet++; quiet >= 2 {
			return nil
		}
	}
}

// settled: no worker holds a message and the server has nothing to deliver.
func (r *strategyRun) settled(ctx context.Context) (bool, error) {
	if r.inflight.Load() != 0 {
		return false, nil
	}
	ok, err := r.box.settled(ctx, r.api)
	if err != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	return ok && r.inflight.Load() == 0, err
}

func (r *strategyRun) report() {
	if r.o.Progress != nil {
		r.o.Progress(r.strategy.Name, int(r.completed.Load()), len(r.done))
	}
}

// now is the time since the clock started, the Recorder's time base.
func (r *strategyRun) now() time.Duration { return time.Since(r.start) }

// markDone counts a message's first completion.
func (r *strategyRun) markDone(msg int) {
	if r.done[msg].CompareAndSwap(false, true) {
		r.completed.Add(1)
	}
}
