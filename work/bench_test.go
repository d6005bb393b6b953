package work

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// BenchmarkFailoverCluster: on a 3-node cluster (16 lanes, replicas 3,
// pinned, ack wait 5s, the default 5s lease), three instances each on its
// own node: how long until a joining instance has its share, until a
// stopping one's lanes are taken, until a killed one's lanes are served
// again, and until the message the killed one had in flight runs again.
//
//	go test ./work -run '^$' -bench FailoverCluster -benchtime 1x
func BenchmarkFailoverCluster(b *testing.B) {
	cl := natstest.StartCluster(b, 3)
	_, js := natstest.Connect(b, cl.Servers[0].URL())
	natstest.KeepAccountStreams(b, js)
	i := 0
	for b.Loop() {
		i++
		p := testutil.Plan(b, fmt.Sprintf("fo%d", i), 16, func(d *planner.Design) {
			d.Stream.Replicas = 3
			d.Lane.Pinned = true
			d.Lane.AckWait = planner.Duration(5 * time.Second)
		})
		natstest.CreateLanes(b, js, p)
		hold := make(chan struct{})
		var redelivered atomic.Int64
		cfg := func(name string) Config { return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name} }
		h := func(name string) Handler {
			return HandlerFunc(func(ctx context.Context, m *Msg) error {
				if name == "c" {
					select { // c dies with this message in flight
					case <-hold:
					case <-ctx.Done():
					}
					return ctx.Err()
				}
				if m.Attempt > 1 {
					redelivered.CompareAndSwap(0, time.Now().UnixNano())
				}
				return nil
			})
		}
		a := startWorker(b, cl.Servers[0].URL(), cfg("a"), h("a"))
		bb := startWorker(b, cl.Servers[1].URL(), cfg("b"), h("b"))
		c := startWorker(b, cl.Servers[2].URL(), cfg("c"), h("c"))
		testutil.WaitFor(b, "5/5/6", 30*time.Second, func() bool { return settled(p, 5, 6, a, bb, c) })

		t0 := time.Now()
		d := startWorker(b, cl.Servers[0].URL(), cfg("d"), h("d"))
		testutil.WaitFor(b, "4/4/4/4", 30*time.Second, func() bool { return settled(p, 4, 4, a, bb, c, d) })
		join := time.Since(t0)

		t0 = time.Now()
		d.wait(b)
		testutil.WaitFor(b, "5/5/6 again", 30*time.Second, func() bool { return settled(p, 5, 6, a, bb, c) })
		leave := time.Since(t0)

		// A message for one of c's lanes, which c holds when it dies.
		var cLane string
		for lane, owners := range serving(c) {
			cLane = lane
			_ = owners
			break
		}
		var part int
		for _, l := range p.Lanes {
			if l.Name == cLane {
				part = l.Partition
			}
		}
		natstest.Publish(b, js, natstest.SubjectsFor(b, p, part, 1)...)
		testutil.WaitFor(b, "c busy", 10*time.Second, func() bool { return c.w.Stats().InFlight == 1 })
		t0 = time.Now()
		c.kill(b)
		close(hold)
		testutil.WaitFor(b, "8/8", 30*time.Second, func() bool { return settled(p, 8, 8, a, bb) })
		moved := time.Since(t0)
		testutil.WaitFor(b, "the message in flight run again", 30*time.Second, func() bool { return redelivered.Load() != 0 })
		again := time.Duration(redelivered.Load() - t0.UnixNano())
		a.wait(b)
		bb.wait(b)
		if err := js.DeleteStream(context.Background(), p.Stream.Name); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(join.Milliseconds()), "ms-join")
		b.ReportMetric(float64(leave.Milliseconds()), "ms-leave")
		b.ReportMetric(float64(moved.Milliseconds()), "ms-kill-lanes-moved")
		b.ReportMetric(float64(again.Milliseconds()), "ms-kill-message-rerun")
	}
}
