package work_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/clock"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// drainRaw is the minimal pull-and-ack loop the runtime is held against:
// per lane, on one connection for all lanes, a pull request on the lane's
// inbox, then an ack per message, fire and forget. Per message, a request
// for one message (standing false), or one standing request for 500 at a
// time (standing true: what the runtime keeps on a busy serial lane).
// (nats.go's Messages iterator stalled here now and then until its
// request expired, at 16 lanes: a baseline must not.)
func drainRaw(b *testing.B, url string, p *planner.Plan, perLane int, standing bool) float64 {
	nc, _ := natstest.Connect(b, url)
	defer nc.Close()
	var sp worktest.Span
	var wg sync.WaitGroup
	for _, l := range p.Lanes {
		inbox := nc.NewInbox()
		ch := make(chan *nats.Msg, 8)
		sub, err := nc.ChanSubscribe(inbox, ch)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := "$JS.API.CONSUMER.MSG.NEXT." + p.Stream.Name + "." + l.Name
			req, batch := []byte(`{"batch":1,"expires":5000000000}`), 1
			if standing {
				req, batch = []byte(`{"batch":500,"expires":30000000000}`), 500
			}
			for done := 0; done < perLane; {
				if done%batch == 0 {
					if err := nc.PublishRequest(next, inbox, req); err != nil {
						b.Error(err)
						return
					}
				}
				m := <-ch
				if m.Header.Get("Status") != "" {
					continue // 408: the request expired
				}
				if err := m.Respond([]byte("+ACK")); err != nil {
					b.Error(err)
					return
				}
				sp.Tick()
				done++
			}
		}()
	}
	wg.Wait()
	return sp.Rate()
}

// BenchmarkDrain: the runtime with a no-op handler against the minimal
// pull-and-ack loops and nats.go's Consume (a standing request of 500,
// fire-and-forget acks: what orbit.go's pcgroups runs), draining the same
// backlog on the same server, taken in turns: 1 lane and 16 lanes. Issue
// 18 asks for at least 1.0x Consume on 16 lanes.
//
//	go test ./work -run '^$' -bench Drain -benchtime 3x
func BenchmarkDrain(b *testing.B) {
	for _, tc := range []struct{ lanes, perLane int }{{1, 15000}, {16, 3000}} {
		b.Run(fmt.Sprintf("lanes=%d", tc.lanes), func(b *testing.B) {
			s := natstest.Start(b)
			_, js := natstest.Connect(b, s.URL())
			natstest.KeepAccountStreams(b, js)
			var one, standing, con, wk []float64
			i := 0
			for b.Loop() {
				for _, kind := range []string{"one", "standing", "consume", "work"} {
					i++
					p := worktest.Backlog(b, js, fmt.Sprintf("drain%d", i), tc.lanes, tc.perLane)
					switch kind {
					case "one":
						one = append(one, drainRaw(b, s.URL(), p, tc.perLane, false))
					case "standing":
						standing = append(standing, drainRaw(b, s.URL(), p, tc.perLane, true))
					case "consume":
						con = append(con, worktest.DrainConsume(b, js, p, tc.perLane))
					case "work":
						wk = append(wk, worktest.Drain(b, s.URL(), p, tc.lanes*tc.perLane, nil))
					}
					worktest.DropStream(b, js, p.Stream.Name)
				}
			}
			b.ReportMetric(worktest.Median(one), "raw-one-msgs/s")
			b.ReportMetric(worktest.Median(standing), "raw-standing-msgs/s")
			b.ReportMetric(worktest.Median(con), "consume-msgs/s")
			b.ReportMetric(worktest.Median(wk), "work-msgs/s")
			b.ReportMetric(worktest.Median(wk)/worktest.Median(one), "x-raw-one")
			b.ReportMetric(worktest.Median(wk)/worktest.Median(standing), "x-raw-standing")
			b.ReportMetric(worktest.Median(wk)/worktest.Median(con), "x-consume")
			b.Logf("raw one at a time %v, raw standing %v, consume %v, work %v", one, standing, con, wk)
		})
	}
}

// BenchmarkScaling: a 1 ms handler, 16 lanes against one lane (the same
// backlog per lane). The issue asks for at least 12x.
//
//	go test ./work -run '^$' -bench Scaling -benchtime 3x
func BenchmarkScaling(b *testing.B) {
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.URL())
	natstest.KeepAccountStreams(b, js)
	const perLane = 1500
	clocks := sync.Pool{New: func() any { return clock.New() }}
	sleep := func() {
		c := clocks.Get().(*clock.Clock)
		c.Sleep(time.Millisecond)
		clocks.Put(c)
	}
	var one, sixteen []float64
	i := 0
	for b.Loop() {
		for _, lanes := range []int{1, 16} {
			i++
			p := worktest.Backlog(b, js, fmt.Sprintf("scale%d", i), lanes, perLane)
			r := worktest.Drain(b, s.URL(), p, lanes*perLane, work.HandlerFunc(func(context.Context, *work.Msg) error { sleep(); return nil }))
			if lanes == 1 {
				one = append(one, r)
			} else {
				sixteen = append(sixteen, r)
			}
			worktest.DropStream(b, js, p.Stream.Name)
		}
	}
	b.ReportMetric(worktest.Median(one), "1-lane-msgs/s")
	b.ReportMetric(worktest.Median(sixteen), "16-lanes-msgs/s")
	b.ReportMetric(worktest.Median(sixteen)/worktest.Median(one), "x-scaling")
	b.Logf("1 lane %v, 16 lanes %v", one, sixteen)
}

// BenchmarkLanes1024: one instance takes 1,024 lanes; how long until it
// serves them all, the memory and goroutines per lane (the process heap,
// which includes the embedded server's side of the waiting pull
// requests), and the drain rate of a backlog spread over them.
//
//	go test ./work -run '^$' -bench Lanes1024 -benchtime 1x
func BenchmarkLanes1024(b *testing.B) {
	for _, storage := range []string{"file", "memory"} {
		b.Run(storage, func(b *testing.B) { lanes1024(b, storage) })
	}
}

func lanes1024(b *testing.B, storage string) {
	const lanes, perLane = 1024, 20
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.URL())
	for b.Loop() {
		p := worktest.Backlog(b, js, "wide", lanes, perLane, func(d *planner.Design) { d.Stream.Storage = storage })
		var sp worktest.Span
		done := make(chan struct{})
		nc, err := nats.Connect(s.URL())
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()
		// Hold every message until the instance serves every lane, so the
		// figures are taken with a message in flight on none of them.
		gate := make(chan struct{})
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		w, err := work.New(js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "wide"}, work.HandlerFunc(func(context.Context, *work.Msg) error {
			<-gate
			if sp.Tick() == lanes*perLane {
				close(done)
			}
			return nil
		}))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan error, 1)
		started := time.Now()
		go func() { ended <- w.Run(ctx) }()
		testutil.WaitFor(b, "1,024 lanes served", time.Minute, func() bool { return w.Stats().Serving == lanes })
		took := time.Since(started)
		testutil.WaitFor(b, "a message in every lane", time.Minute, func() bool { return w.Stats().InFlight == lanes })
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLaneGoroutines := float64(runtime.NumGoroutine()-goroutines) / lanes
		close(gate)
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			b.Fatal("not drained")
		}
		cancel()
		<-ended
		nc.Close()
		b.ReportMetric(float64(took.Milliseconds()), "ms-to-serve-all")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/lanes/1024, "KB-heap/lane")
		b.ReportMetric(perLaneGoroutines, "goroutines/lane")
		b.ReportMetric(sp.Rate(), "drain-msgs/s")
	}
}

// BenchmarkDrainReplicated: what the confirmed ack costs. On a 3-node
// cluster with replicas 3, the runtime waits for each ack's answer, which
// comes once the ack is replicated (order across a leader change needs
// it: docs/work.md); nats.go's Consume does not. 16 lanes, the same
// backlog, taken in turns, the worker and the loop on the same node.
//
//	go test ./work -run '^$' -bench DrainReplicated -benchtime 3x
func BenchmarkDrainReplicated(b *testing.B) {
	const lanes, perLane = 16, 1000
	cl := natstest.StartCluster(b, 3)
	url := cl.Servers[0].URL()
	_, js := natstest.Connect(b, url)
	var con, wk []float64
	i := 0
	for b.Loop() {
		for _, kind := range []string{"consume", "work"} {
			i++
			p := worktest.Backlog(b, js, fmt.Sprintf("repl%d", i), lanes, perLane, func(d *planner.Design) { d.Stream.Replicas = 3 })
			if kind == "consume" {
				con = append(con, worktest.DrainConsume(b, js, p, perLane))
			} else {
				wk = append(wk, worktest.Drain(b, url, p, lanes*perLane, nil))
			}
			worktest.DropStream(b, js, p.Stream.Name)
		}
	}
	b.ReportMetric(worktest.Median(con), "consume-msgs/s")
	b.ReportMetric(worktest.Median(wk), "work-msgs/s")
	b.ReportMetric(worktest.Median(wk)/worktest.Median(con), "x-consume")
	b.Logf("consume %v, work %v", con, wk)
}
