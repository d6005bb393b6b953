package work

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/clock"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// span records the first and the last of n events; rate is the events
// between them per second, so start-up costs are left out on both sides.
type span struct {
	n           atomic.Int64
	first, last atomic.Int64
}

func (s *span) tick() int64 {
	now := time.Now().UnixNano()
	s.first.CompareAndSwap(0, now)
	s.last.Store(now)
	return s.n.Add(1)
}

func (s *span) rate() float64 {
	return float64(s.n.Load()-1) / (time.Duration(s.last.Load() - s.first.Load())).Seconds()
}

// backlog creates a design with lanes lanes and stores perLane messages in
// each, and returns its plan.
func backlog(b *testing.B, js jetstream.JetStream, name string, lanes, perLane int, edit ...func(*planner.Design)) *planner.Plan {
	b.Helper()
	p := natstest.Plan(b, name, lanes, edit...)
	natstest.CreateLanes(b, js, p)
	var subjects []string
	keys := make([][]string, lanes)
	for l := range lanes {
		keys[l] = natstest.SubjectsFor(b, p, l, 4)
	}
	for i := 0; i < perLane; i++ {
		for l := range lanes {
			subjects = append(subjects, keys[l][i%4])
		}
	}
	natstest.PublishAsync(b, js, subjects...)
	for _, l := range p.Lanes {
		natstest.WaitPending(b, js, p.Stream.Name, l.Name, uint64(perLane))
	}
	return p
}

func dropStream(b *testing.B, js jetstream.JetStream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, name); err != nil {
		b.Fatal(err)
	}
}

// drainRaw is the minimal pull-and-ack loop the runtime is held against:
// per lane, on one connection for all lanes, a pull request for one
// message on the lane's inbox, then an ack (Ack: fire and forget; double:
// a request, answered once the ack is applied). (nats.go's Messages
// iterator stalled here now and then until its request expired, at 16
// lanes: a baseline must not.)
func drainRaw(b *testing.B, url string, p *planner.Plan, perLane int, double bool) float64 {
	nc, _ := natstest.Connect(b, url)
	defer nc.Close()
	var sp span
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
			req := []byte(`{"batch":1,"expires":5000000000}`)
			for done := 0; done < perLane; {
				if err := nc.PublishRequest(next, inbox, req); err != nil {
					b.Error(err)
					return
				}
				m := <-ch
				if m.Header.Get("Status") != "" {
					continue // 408: the request expired
				}
				if double {
					_, err = nc.Request(m.Reply, []byte("+ACK"), 10*time.Second)
				} else {
					err = m.Respond([]byte("+ACK"))
				}
				if err != nil {
					b.Error(err)
					return
				}
				sp.tick()
				done++
			}
		}()
	}
	wg.Wait()
	return sp.rate()
}

// drainWork drains the same backlog with a Worker running inner (nil:
// a no-op handler) and returns messages per second.
func drainWork(b *testing.B, url string, p *planner.Plan, total int, inner Handler) float64 {
	var sp span
	done := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, m *Msg) error {
		if inner != nil {
			if err := inner.Handle(ctx, m); err != nil {
				return err
			}
		}
		if sp.tick() == int64(total) {
			close(done)
		}
		return nil
	})
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	w, err := New(nc, Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "bench"}, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	select {
	case <-done:
	case err := <-ended:
		b.Fatalf("worker ended: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("not drained in 5 minutes")
	}
	cancel()
	if err := <-ended; err != nil {
		b.Fatal(err)
	}
	return sp.rate()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkDrain: the runtime with a no-op handler against the minimal
// pull-and-ack loop, draining the same backlog on the same server, taken
// in turns: 1 lane and 16 lanes. The issue asks for at least 0.9x the raw
// rate. The raw loop is measured with a plain ack (fire and forget) and
// with a double ack (what the runtime does: the ack confirmed before the
// next message).
//
//	go test ./work -run '^$' -bench Drain -benchtime 3x
func BenchmarkDrain(b *testing.B) {
	for _, tc := range []struct{ lanes, perLane int }{{1, 15000}, {16, 3000}} {
		b.Run(fmt.Sprintf("lanes=%d", tc.lanes), func(b *testing.B) {
			s := natstest.Start(b)
			_, js := natstest.Connect(b, s.URL())
			natstest.KeepAccountStreams(b, js)
			var ack, dbl, wk []float64
			i := 0
			for b.Loop() {
				for _, kind := range []string{"ack", "double", "work"} {
					i++
					p := backlog(b, js, fmt.Sprintf("drain%d", i), tc.lanes, tc.perLane)
					switch kind {
					case "ack":
						ack = append(ack, drainRaw(b, s.URL(), p, tc.perLane, false))
					case "double":
						dbl = append(dbl, drainRaw(b, s.URL(), p, tc.perLane, true))
					case "work":
						wk = append(wk, drainWork(b, s.URL(), p, tc.lanes*tc.perLane, nil))
					}
					dropStream(b, js, p.Stream.Name)
				}
			}
			b.ReportMetric(median(ack), "raw-ack-msgs/s")
			b.ReportMetric(median(dbl), "raw-doubleack-msgs/s")
			b.ReportMetric(median(wk), "work-msgs/s")
			b.ReportMetric(median(wk)/median(ack), "x-raw-ack")
			b.ReportMetric(median(wk)/median(dbl), "x-raw-doubleack")
			b.Logf("raw ack %v, raw double ack %v, work %v", ack, dbl, wk)
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
			p := backlog(b, js, fmt.Sprintf("scale%d", i), lanes, perLane)
			r := drainWork(b, s.URL(), p, lanes*perLane, HandlerFunc(func(context.Context, *Msg) error { sleep(); return nil }))
			if lanes == 1 {
				one = append(one, r)
			} else {
				sixteen = append(sixteen, r)
			}
			dropStream(b, js, p.Stream.Name)
		}
	}
	b.ReportMetric(median(one), "1-lane-msgs/s")
	b.ReportMetric(median(sixteen), "16-lanes-msgs/s")
	b.ReportMetric(median(sixteen)/median(one), "x-scaling")
	b.Logf("1 lane %v, 16 lanes %v", one, sixteen)
}

// BenchmarkHandlers: the per-message cost of --exec and --http on one
// lane, next to what a bare fork of sh -c true and a bare POST cost.
//
//	go test ./work -run '^$' -bench Handlers -benchtime 3x
func BenchmarkHandlers(b *testing.B) {
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.URL())
	natstest.KeepAccountStreams(b, js)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	hh, _ := NewHTTPHandler(srv.URL)
	eh := &ExecHandler{Command: "true"}
	const execN, httpN = 400, 3000
	var execMsg, forkMsg, httpMsg, postMsg []float64
	i := 0
	for b.Loop() {
		i++
		p := backlog(b, js, fmt.Sprintf("exec%d", i), 1, execN)
		execMsg = append(execMsg, 1e6/drainWork(b, s.URL(), p, execN, eh))
		dropStream(b, js, p.Stream.Name)
		start := time.Now()
		for range execN {
			if err := exec.Command("sh", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
		forkMsg = append(forkMsg, float64(time.Since(start).Microseconds())/execN)

		p = backlog(b, js, fmt.Sprintf("http%d", i), 1, httpN)
		httpMsg = append(httpMsg, 1e6/drainWork(b, s.URL(), p, httpN, hh))
		dropStream(b, js, p.Stream.Name)
		start = time.Now()
		for range httpN {
			resp, err := hh.Client.Post(srv.URL, "application/octet-stream", nil)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
		postMsg = append(postMsg, float64(time.Since(start).Microseconds())/httpN)
	}
	b.ReportMetric(median(execMsg), "exec-µs/msg")
	b.ReportMetric(median(forkMsg), "fork-µs")
	b.ReportMetric(median(httpMsg), "http-µs/msg")
	b.ReportMetric(median(postMsg), "post-µs")
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
		p := backlog(b, js, "wide", lanes, perLane, func(d *planner.Design) { d.Stream.Storage = storage })
		var sp span
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
		w, err := New(nc, Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "wide"}, HandlerFunc(func(context.Context, *Msg) error {
			<-gate
			if sp.tick() == lanes*perLane {
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
		waitFor(b, "1,024 lanes served", time.Minute, func() bool { return w.Stats().Serving == lanes })
		took := time.Since(started)
		waitFor(b, "a message in every lane", time.Minute, func() bool { return w.Stats().InFlight == lanes })
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
		b.ReportMetric(sp.rate(), "drain-msgs/s")
	}
}

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
		p := natstest.Plan(b, fmt.Sprintf("fo%d", i), 16, func(d *planner.Design) {
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
		waitFor(b, "5/5/6", 30*time.Second, func() bool { return settled(p, 5, 6, a, bb, c) })

		t0 := time.Now()
		d := startWorker(b, cl.Servers[0].URL(), cfg("d"), h("d"))
		waitFor(b, "4/4/4/4", 30*time.Second, func() bool { return settled(p, 4, 4, a, bb, c, d) })
		join := time.Since(t0)

		t0 = time.Now()
		d.wait(b)
		waitFor(b, "5/5/6 again", 30*time.Second, func() bool { return settled(p, 5, 6, a, bb, c) })
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
		waitFor(b, "c busy", 10*time.Second, func() bool { return c.w.Stats().InFlight == 1 })
		t0 = time.Now()
		c.kill(b)
		close(hold)
		waitFor(b, "8/8", 30*time.Second, func() bool { return settled(p, 8, 8, a, bb) })
		moved := time.Since(t0)
		waitFor(b, "the message in flight run again", 30*time.Second, func() bool { return redelivered.Load() != 0 })
		again := time.Duration(redelivered.Load() - t0.UnixNano())
		a.wait(b)
		bb.wait(b)
		dropStream(b, js, p.Stream.Name)
		b.ReportMetric(float64(join.Milliseconds()), "ms-join")
		b.ReportMetric(float64(leave.Milliseconds()), "ms-leave")
		b.ReportMetric(float64(moved.Milliseconds()), "ms-kill-lanes-moved")
		b.ReportMetric(float64(again.Milliseconds()), "ms-kill-message-rerun")
	}
}
