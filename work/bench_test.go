package work

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
func backlog(b *testing.B, js jetstream.JetStream, name string, lanes, perLane int) *planner.Plan {
	b.Helper()
	p := natstest.Plan(b, name, lanes)
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
// one nats.go Messages iterator per lane asking for one message at a time,
// on one connection, acking each message (Ack, or DoubleAck when double).
func drainRaw(b *testing.B, url string, p *planner.Plan, perLane int, double bool) float64 {
	nc, js := natstest.Connect(b, url)
	defer nc.Close()
	var sp span
	var wg sync.WaitGroup
	for _, l := range p.Lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			c, err := js.Consumer(ctx, p.Stream.Name, l.Name)
			if err != nil {
				b.Error(err)
				return
			}
			it, err := c.Messages(jetstream.PullMaxMessages(1))
			if err != nil {
				b.Error(err)
				return
			}
			defer it.Stop()
			for range perLane {
				m, err := it.Next()
				if err != nil {
					b.Error(err)
					return
				}
				if double {
					err = m.DoubleAck(ctx)
				} else {
					err = m.Ack()
				}
				if err != nil {
					b.Error(err)
					return
				}
				sp.tick()
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
	clocks := sync.Pool{New: func() any { return newClock() }}
	sleep := func() {
		c := clocks.Get().(*clock)
		c.sleep(time.Millisecond)
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
