package live

import (
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// BenchmarkLiveScaling measures what lanes buy on a real server: with 1ms of
// work per message, the throughput of 16 lanes against one lane (a backlog,
// one worker per lane, the same load per lane), for the default file storage
// and for memory storage. It reports both in msgs/s and their ratio; the
// issue asks for at least 12x.
//
//	go test -run '^$' -bench LiveScaling -benchtime 1x ./sim/live
func BenchmarkLiveScaling(b *testing.B) {
	for _, storage := range []string{"file", "memory"} {
		b.Run(storage, func(b *testing.B) {
			s := natstest.Start(b)
			const perLane = 2000
			var one, sixteen float64
			for b.Loop() {
				one = scalingRun(b, s, storage, 1, perLane)
				sixteen = scalingRun(b, s, storage, 16, perLane)
			}
			b.ReportMetric(one, "msgs/s-1-lane")
			b.ReportMetric(sixteen, "msgs/s-16-lanes")
			b.ReportMetric(sixteen/one, "x-scaling")
		})
	}
}

func scalingRun(b *testing.B, s *natstest.Server, storage string, lanes, perLane int) float64 {
	p := newPlan(b, lanes, func(d *planner.Design) { d.Stream.Storage = storage })
	w := newWorkload(b, p, spec{keys: "uniform:1024", messages: lanes * perLane, process: time.Millisecond})
	r := run(b, given(s, p, w, strategy.Lanes))[0]
	if r.Completed != r.Messages || r.OrderViolations != 0 {
		b.Fatalf("%d lanes: completed %d of %d, %d order violations", lanes, r.Completed, r.Messages, r.OrderViolations)
	}
	b.Logf("%d lane(s), %s: %.0f msgs/s (model, busiest lane: %.0f)", lanes, storage, r.Throughput, backlogThroughput(p, w, time.Millisecond))
	return r.Throughput
}
