package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/progress"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/record"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// runLive is the live runner; tests replace it to check what it is asked.
var runLive = live.Run

// liveResults runs the live simulation and puts the model's prediction
// beside each live result.
// It also returns the lanes strategy's lane report, read on the server as
// lanes inspect would before the run's stream is removed.
// server is where the run ran (see render.Simulation.Server).
func liveResults(ctx context.Context, o SimulateOptions, w *workload.Workload, predictions []record.Result) (results []render.StrategyResult, lanes *health.Report, server string, err error) {
	server = "embedded"
	var kept []string // streams --keep leaves on a named server
	meter := progress.New(o.IO.Err, o.IO.ErrTTY, "simulate")
	req := live.Options{Conn: o.Conn, ServerGiven: o.Conn.Given(), Plan: o.Plan, Workload: w, Strategies: o.Strategies,
		WorkersPerLane: o.Workers, InProgress: o.InProgress, Lease: o.Lease, Keep: o.Keep,
		Progress: func(name string, done, total int) { meter.Update("live "+name, int64(done), int64(total)) },
		Connected: func(url string) {
			if url != "" {
				server = url
			}
		},
		BeforeCleanup: func(ctx context.Context, c *connect.Conn, name, stream string) {
			if o.Keep && o.Conn.Given() {
				kept = append(kept, stream)
			}
			if strategy.MustLookup(name).Consumers != strategy.PerPartition {
				return
			}
			r, err := health.Inspect(ctx, c, health.Options{Stream: stream})
			if err != nil {
				fmt.Fprintf(o.IO.Err, "warning: cannot read the lane table after the run: %v\n", err)
				return
			}
			lanes = r
		}}
	ran, err := runLive(ctx, req)
	meter.Finish()
	if len(kept) > 0 {
		fmt.Fprintf(o.IO.Err, "kept on the server (--keep): streams %s; remove each with: nats stream rm NAME\n", strings.Join(kept, ", "))
	}
	for _, r := range ran {
		sr := render.StrategyResult{Result: r}
		for i := range predictions {
			if predictions[i].Strategy == r.Strategy {
				sr.Model = &predictions[i]
			}
		}
		results = append(results, sr)
	}
	return results, lanes, server, err
}
