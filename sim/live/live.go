// Package live runs a simulation workload on a real nats-server: it applies
// the design to a stream of its own, publishes the workload, runs real
// workers (goroutines with their own connections, pull consumers, acks,
// in-progress acks, injected crashes) and judges what they did with the same
// Recorder the model uses. It removes everything it created unless asked to
// keep it, also on error and on cancellation.
package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/embedded"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// Options describe one live run.
type Options struct {
	// Conn reaches the server when ServerGiven is true.
	Conn connect.Options
	// ServerGiven says a server was named (flags, NATS_URL or a context).
	// When false, Run starts an embedded nats-server in a temporary
	// directory and removes it afterwards.
	ServerGiven bool

	Plan       *planner.Plan
	Workload   *workload.Workload
	Strategies []strategy.Strategy // run one after another, in this order

	// WorkersPerLane is the number of workers on each lane (default 1).
	// Every strategy gets the same total: partitions x WorkersPerLane.
	WorkersPerLane int
	// AckWait overrides the design's lane ack wait when positive.
	AckWait time.Duration
	// InProgress makes workers send +WPI every ack wait / 3 while working
	// (and renew their lease, under the lease mechanics).
	InProgress bool
	// Lease configures the lease mechanics (the kv-lease strategy).
	Lease strategy.LeaseSettings
	// Keep leaves the streams and consumers on the server (a given server
	// only: an embedded server goes away with the run).
	Keep bool

	// Progress, when set, is called with the messages done so far (first
	// completions) when a strategy starts, about twenty times a second while
	// it runs, and once at its end; always from the goroutine that called Run.
	Progress func(strategy string, done, total int)
	// Connected, when set, is told which server the run uses once it is
	// connected: its URL without user info, or "" for an embedded one.
	Connected func(server string)
	// BeforeCleanup, when set, is called after each strategy's workers have
	// stopped and before its stream is removed (also with Keep), with the
	// control connection and the stream name, e.g. to print the lane table.
	// ctx is not the caller's: it still works after a cancellation.
	BeforeCleanup func(ctx context.Context, c *connect.Conn, strategy, stream string)

	// hold is a test-only fault: a worker that receives a message for
	// which hold returns true acks it unprocessed, runs the next message of
	// the same key first, then runs the held one. The order check must
	// catch it.
	hold func(msg int) bool
}

// cleanupTimeout bounds the hook and the removal after a cancellation.
const cleanupTimeout = 30 * time.Second

// Run runs each strategy on the server, one after another, and returns one
// Result per strategy run. When ctx is cancelled it stops the publisher and
// the workers, cleans up, and returns the results so far (the interrupted
// strategy's partial result last) together with ctx.Err().
func Run(ctx context.Context, o Options) (results []judge.Result, retErr error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	connOpts, stop, err := o.server()
	if err != nil {
		return nil, err
	}
	defer stop()

	openCtx, cancel := context.WithTimeout(ctx, timeoutOf(connOpts))
	c, err := connect.Open(openCtx, connOpts)
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if o.Connected != nil {
		server := c.Server
		if !o.ServerGiven {
			server = ""
		}
		o.Connected(server)
	}

	id := randomID()
	var created []*sandbox
	// Streams are removed together at the end, not after each strategy:
	// deleting an account's last stream and creating the next one at once
	// can fail on the server (it removes the account's stream directory
	// while the create makes a new one inside it).
	defer func() {
		if err := removeAll(ctx, c, o, created); err != nil && retErr == nil {
			retErr = err
		}
	}()
	for _, s := range o.Strategies {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		res, err := runStrategy(ctx, c, connOpts, o, id, s, &created)
		if res != nil {
			results = append(results, *res)
		}
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// removeAll deletes the sandboxes' streams (and so their consumers) and
// their workers' buckets, with its own deadline so that it still runs
// after a cancellation. Keep (on a given server) keeps the streams.
func removeAll(ctx context.Context, c *connect.Conn, o Options, boxes []*sandbox) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	api := jsapi.New(c)
	var errs []error
	for _, box := range boxes {
		errs = append(errs, box.remove(cctx, api, o.Keep && o.ServerGiven))
	}
	return errors.Join(errs...)
}

// Check refuses options a live run cannot carry out, before anything is
// created (Run checks them too).
func (o *Options) Check() error {
	switch {
	case o.Plan == nil:
		return errors.New("live simulation: no plan")
	case o.Workload == nil:
		return errors.New("live simulation: no workload")
	case len(o.Strategies) == 0:
		return errors.New("live simulation: no strategy to run")
	case o.WorkersPerLane < 0:
		return fmt.Errorf("--workers must be at least 1")
	case o.AckWait < 0:
		return fmt.Errorf("--ack-wait must be a positive duration")
	}
	if o.WorkersPerLane == 0 {
		o.WorkersPerLane = 1
	}
	for _, s := range o.Strategies {
		switch s.Live {
		case strategy.Pull:
		case strategy.Work:
			// The strategy runs on the work package itself, never on a
			// stand-in: a live run measures the runtime that ships.
			if !groupsFit(o.WorkersPerLane, s.Shape(o.params())) {
				return fmt.Errorf("strategy %s runs live on lanes work, one instance per worker of a lane: at most %d workers per lane (--workers %d), and lanes of max ack pending 1, or key-parallel lanes (--keys-in-flight K, which sets it to K)",
					s.Name, maxGroups, o.WorkersPerLane)
			}
		case strategy.Lease:
			switch {
			case o.Lease.TTL < time.Second || o.Lease.TTL%time.Second != 0:
				return fmt.Errorf("the lease TTL %s must be whole seconds, at least 1s (the server's per-key TTLs)", o.Lease.TTL)
			case o.Lease.Retry <= 0:
				return fmt.Errorf("the lease retry delay must be positive")
			}
		default:
			return fmt.Errorf("strategy %q cannot run live: its mechanics %q are not built here", s.Name, s.Live)
		}
	}
	return nil
}

// server returns the connection options to use, and a function that stops
// whatever server it started. With no server given it starts an embedded
// one in a temporary directory, removed by stop.
func (o *Options) server() (connect.Options, func(), error) {
	if o.ServerGiven {
		return o.Conn, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "lanes-sim-*")
	if err != nil {
		return connect.Options{}, nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s, err := embedded.Start(embedded.Options(dir))
	if err != nil {
		os.RemoveAll(dir)
		return connect.Options{}, nil, err
	}
	stop := func() {
		s.Stop()
		os.RemoveAll(dir)
	}
	return connect.Options{Server: s.ClientURL(), Timeout: o.Conn.Timeout, Name: "lanes-simulate"}, stop, nil
}

func timeoutOf(o connect.Options) time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return connect.DefaultTimeout
}
