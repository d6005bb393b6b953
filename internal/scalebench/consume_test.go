//go:build scale

package scalebench

import (
	"fmt"
	"os"
	"testing"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/worktest"
)

// BenchmarkScaleDrain16VsConsume: the bar on 16 serial lanes. The
// work package's no-op drain against a standing-pull Consume loop with
// fire-and-forget acks, on one server process, in turns (which goes first
// alternates), each round on a fresh backlog of 3,000 messages per lane.
// x-consume is work/consume; the issue asks for at least 1.0. Each rate
// is also measured over the drain's middle eight tenths (x-consume-middle):
// its steady state, without the lanes' start and the tail of the lanes
// ending last (see worktest.Span).
//
//	go test -tags scale -run '^$' -bench Drain16VsConsume -benchtime 1x ./internal/scalebench
func BenchmarkScaleDrain16VsConsume(b *testing.B) {
	const lanes, perLane = 16, 3000
	rounds := envInt(b, "LANES_SCALE_ROUNDS", 5)
	srv := startServer(b)
	nc, js, err := connect(srv.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	natstest.KeepAccountStreams(b, js)
	var wk, con, wkMid, conMid []float64
	cpus := map[string][]float64{} // µs per message: "work-server", "work-client", ...
	measure := func(kind string, n int, drain func() worktest.Rates) worktest.Rates {
		server, self := cpu(b, srv.pid()), cpu(b, 0)
		rate := drain()
		cpus[kind+"-server"] = append(cpus[kind+"-server"], float64((cpu(b, srv.pid())-server).Microseconds())/float64(n))
		cpus[kind+"-client"] = append(cpus[kind+"-client"], float64((cpu(b, 0)-self).Microseconds())/float64(n))
		return rate
	}
	i := 0
	for b.Loop() {
		for r := range rounds {
			kinds := []string{"work", "consume"}
			if r%2 == 1 {
				kinds[0], kinds[1] = kinds[1], kinds[0]
			}
			for _, kind := range kinds {
				if only := os.Getenv("LANES_SCALE_ONLY"); only != "" && only != kind {
					continue // profiling one side: -cpuprofile
				}
				i++
				p := worktest.Backlog(b, js, fmt.Sprintf("vs%d", i), lanes, perLane)
				if kind == "work" {
					r := measure(kind, lanes*perLane, func() worktest.Rates { return worktest.DrainRates(b, srv.url, p, lanes*perLane, nil) })
					wk, wkMid = append(wk, r.Full), append(wkMid, r.Middle)
				} else {
					r := measure(kind, lanes*perLane, func() worktest.Rates { return worktest.DrainConsumeRates(b, js, p, perLane) })
					con, conMid = append(con, r.Full), append(conMid, r.Middle)
				}
				worktest.DropStream(b, js, p.Stream.Name)
			}
		}
	}
	m := func(v []float64) float64 {
		if len(v) == 0 {
			return 0 // LANES_SCALE_ONLY ran the other side only
		}
		return worktest.Median(v)
	}
	b.ReportMetric(m(wk), "work-msgs/s")
	b.ReportMetric(m(con), "consume-msgs/s")
	b.ReportMetric(m(wk)/m(con), "x-consume")
	b.ReportMetric(m(wkMid)/m(conMid), "x-consume-middle")
	for _, k := range []string{"work-server", "work-client", "consume-server", "consume-client"} {
		b.ReportMetric(m(cpus[k]), "us-cpu-"+k+"/msg")
	}
	b.Logf("16 lanes, %d per lane: work %.0f msg/s, consume %.0f msg/s (medians), x-consume %.2f; work %.0f, consume %.0f; "+
		"middle eight tenths: work %.0f, consume %.0f, x-consume-middle %.2f; "+
		"CPU per message (µs, medians): work server %.1f client %.1f, consume server %.1f client %.1f",
		perLane, m(wk), m(con), m(wk)/m(con), wk, con, m(wkMid), m(conMid), m(wkMid)/m(conMid),
		m(cpus["work-server"]), m(cpus["work-client"]), m(cpus["consume-server"]), m(cpus["consume-client"]))
}
