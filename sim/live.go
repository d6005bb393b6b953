package sim

import (
	"context"
	"fmt"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// live runs the workload on a server and puts the model's prediction
// beside each live result in r. Before the lanes strategy's stream is
// removed, it reads its lane table as lanes inspect would (r.Lanes).
func (o Options) live(ctx context.Context, w *workload.Workload, predictions []judge.Result, r *Report) error {
	r.Server = "embedded"
	req := live.Options{Conn: o.Conn, ServerGiven: o.Conn.Given(), Plan: o.Plan, Workload: w, Strategies: o.Strategies,
		WorkersPerLane: o.WorkersPerLane, InProgress: o.InProgress, Lease: o.Lease, Keep: o.Keep, Progress: o.Progress,
		Connected: func(url string) {
			if url != "" {
				r.Server = url
			}
		},
		BeforeCleanup: func(ctx context.Context, c *connect.Conn, name, stream string) {
			if o.Keep && o.Conn.Given() {
				r.Kept = append(r.Kept, stream)
			}
			if strategy.MustLookup(name).Consumers != strategy.PerPartition {
				return
			}
			lanes, err := health.Inspect(ctx, c, health.Options{Stream: stream})
			if err != nil {
				o.warn("cannot read the lane table after the run: %v", err)
				return
			}
			r.Lanes = lanes
		}}
	if err := req.Check(); err != nil {
		return &InputError{err}
	}
	run := o.RunLive
	if run == nil {
		run = live.Run
	}
	ran, err := run(ctx, req)
	for _, res := range ran {
		sr := StrategyResult{Result: res}
		for i := range predictions {
			if predictions[i].Strategy == res.Strategy {
				sr.Model = &predictions[i]
			}
		}
		r.Results = append(r.Results, sr)
	}
	return err
}

func (o Options) warn(format string, args ...any) {
	if o.Warn != nil {
		o.Warn(fmt.Sprintf(format, args...))
	}
}
