package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/record"
	"github.com/lanes-dev/lanes/sim/workload"
)

// LiveRequest is everything the live runner (package sim/live) needs to
// run the same workload on a real server.
type LiveRequest struct {
	// Conn is where to run. ServerGiven false means no server was named
	// (no --server, NATS_URL or --context): start an embedded nats-server in
	// a temporary directory and remove it afterwards.
	Conn        connect.Options
	ServerGiven bool
	// Plan is the design: mapping, stream and lane consumer settings
	// (ack wait, max deliver, backoff, max ack pending, pinned and its TTL).
	// The runner creates its own uniquely named stream from it.
	Plan *planner.Plan
	// Workload has the messages in publish order with arrival times, and
	// Attempt(i, delivery) decides each attempt's work time and crash, as
	// the model does.
	Workload   *workload.Workload
	Strategies []string // in this order; results come back in the same order
	// Configs are the model's configuration per strategy (same order):
	// Configs[i].Shape() gives the consumers, workers each and
	// MaxAckPending to create, and model.NewRecorder(Workload, Configs[i])
	// the recorder to report to, exactly as the model runs them.
	Configs []model.Config
	// WorkersPerLane: every strategy gets Plan partitions x WorkersPerLane workers.
	WorkersPerLane int
	AckWait        time.Duration // Plan.Design.Lane.AckWait, spelled out
	InProgress     bool          // workers send +WPI every AckWait/3 while working
	Keep           bool          // keep the stream and consumers afterwards
	// Progress is called as messages complete (from any goroutine); it
	// draws the progress bar on stderr. Never nil.
	Progress func(strategy string, done, total int)
}

// runLive runs the live simulation. TODO(lead): wire sim/live in here.
// sim/live cannot import commands (commands imports it), so it takes its
// own request with these fields, converted in an init of this package:
//
//	runLive = func(ctx context.Context, r LiveRequest) ([]record.Result, error) {
//		return live.Run(ctx, live.Request{Conn: r.Conn, Embedded: !r.ServerGiven, Plan: r.Plan, ...})
//	}
//
// On Ctrl-C it should return the results so far with ctx.Err(): simulate
// still prints them beside the model and exits 130. The inspect lane table
// after a live run is not printed here yet.
var runLive = func(ctx context.Context, req LiveRequest) ([]record.Result, error) {
	return nil, errors.New("--live is not available in this build: the live runner (sim/live) is not wired in yet")
}

// liveResults runs the live simulation and puts the model's prediction
// beside each live result.
func liveResults(ctx context.Context, o SimulateOptions, w *workload.Workload, predictions []record.Result) ([]render.StrategyResult, error) {
	parts, err := keyPartitions(o.Plan, w.Spec.Keys)
	if err != nil {
		return nil, err
	}
	req := LiveRequest{Conn: o.Conn, ServerGiven: o.Conn.Given(), Plan: o.Plan, Workload: w, Strategies: o.Strategies,
		WorkersPerLane: o.Workers, AckWait: o.Plan.Design.Lane.AckWait.D(), InProgress: o.InProgress, Keep: o.Keep,
		Progress: liveProgress(o.IO)}
	for _, s := range o.Strategies {
		req.Configs = append(req.Configs, modelConfig(o, s, o.Plan.Design.Partitions, parts))
	}
	live, err := runLive(ctx, req)
	if o.IO.ErrTTY {
		fmt.Fprintln(o.IO.Err) // end the progress line
	}
	var out []render.StrategyResult
	for _, r := range live {
		sr := render.StrategyResult{Result: r}
		for i := range predictions {
			if predictions[i].Strategy == r.Strategy {
				sr.Model = &predictions[i]
			}
		}
		out = append(out, sr)
	}
	return out, err
}

// liveProgress draws one progress line on stderr when it is a
// terminal, redrawn at most once per percent.
func liveProgress(io *IO) func(strategy string, done, total int) {
	if !io.ErrTTY {
		return func(string, int, int) {}
	}
	var mu sync.Mutex
	last := ""
	s := render.NewStyles(io.Err)
	return func(strategy string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		key := fmt.Sprintf("%s %d", strategy, done*100/max(total, 1))
		if key == last {
			return
		}
		last = key
		fmt.Fprint(io.Err, "\r"+render.ProgressLine(s, strategy, done, total))
	}
}
