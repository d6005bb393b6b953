package health_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

// BenchmarkRead reads, judges and renders (JSON) N lanes, each with a backlog, in
// process: B/op must grow linearly with the lanes.
//
//	go test -run '^$' -bench BenchmarkRead -benchmem ./health
func BenchmarkRead(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			srv := natstest.Start(b)
			_, js := natstest.Connect(b, srv.URL())
			p := testutil.PlanDesign(b, planner.Design{Name: "bench", Subject: "bench.received_from.*", Partitions: n})
			natstest.CreateLanes(b, js, p)
			per := make([]int, n)
			var subjects []string
			for i, full := 0, 0; full < n; i++ {
				s := fmt.Sprintf("bench.received_from.k%d", i)
				part, _ := p.Layout.PartitionOf([]byte(s))
				if per[part] < 4 {
					subjects = append(subjects, s)
					if per[part]++; per[part] == 4 {
						full++
					}
				}
			}
			natstest.PublishAsync(b, js, subjects...)
			conn, err := connect.Open(context.Background(), connect.Options{Server: srv.URL()})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			b.ReportAllocs()
			for b.Loop() {
				r, err := health.Inspect(context.Background(), conn, health.Options{Stream: p.Stream.Name})
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Lanes) != n || r.Summary.TotalBacklog != uint64(4*n) {
					b.Fatalf("read %d lanes, backlog %d", len(r.Lanes), r.Summary.TotalBacklog)
				}
				if err := render.InspectJSON(io.Discard, r, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "lanes")
		})
	}
}
