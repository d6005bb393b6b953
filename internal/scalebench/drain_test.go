//go:build scale

package scalebench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// BenchmarkScaleDrain: a backlog spread over every lane, drained by the
// work package with a no-op handler: messages per second, and the CPU the
// server and this process spend on them. A fresh server per lane count.
//
//	LANES_SCALE_DRAIN_LANES=16,1024 go test -tags scale -run '^$' -bench ScaleDrain$ -benchtime 1x -timeout 60m ./internal/scalebench
func BenchmarkScaleDrain(b *testing.B) {
	for _, n := range envInts(b, "LANES_SCALE_DRAIN_LANES", []int{16, 1024, 4096, 16384}) {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			msgs := envInt(b, "LANES_SCALE_MSGS", defaultMessages(n))
			var f figures
			for b.Loop() {
				drainOnce(b, n, msgs, &f)
			}
			f.report(b)
		})
	}
}

// defaultMessages keeps each drain within minutes: the rate falls with
// the lane count (the issue measured 412 msg/s at 16,384 lanes). Above
// 4,096 lanes every lane still gets two messages.
func defaultMessages(lanes int) int {
	switch {
	case lanes <= 1024:
		return 100_000
	case lanes <= 4096:
		return 20_000
	}
	return 2 * lanes
}

func drainOnce(b *testing.B, lanes, msgs int, f *figures) {
	srv := startServer(b)
	defer srv.stop()
	design, plan := writeDesign(b, lanes)
	apply(b, srv, design, "applied")
	publishBacklog(b, srv.url, plan, msgs)

	// The CPU times are read at the first and at the last message, as the
	// rate is taken, so that publishing and the worker's start and stop
	// are left out.
	var sp worktest.Span
	var first, last cpuMark
	done := make(chan struct{})
	h := work.HandlerFunc(func(context.Context, *work.Msg) error {
		switch sp.Tick() {
		case 1:
			first.read(srv.pid())
		case int64(msgs):
			last.read(srv.pid())
			close(done)
		}
		return nil
	})
	runWorker(b, srv.url, plan, h, done, drainLimit(msgs))
	server, client := last.since(b, &first)

	rate := sp.Rate()
	serverPer100k := server.Seconds() / float64(msgs-1) * 100_000
	clientPerMsg := float64(client.Microseconds()) / float64(msgs-1)
	f.add("msgs/s", rate)
	f.add("s-server-cpu/100k-msgs", serverPer100k)
	f.add("us-client-cpu/msg", clientPerMsg)
	b.Logf("%d lanes, %d messages: %.0f msg/s; server CPU %.2f s per 100k messages; this process %.1f µs CPU per message",
		lanes, msgs, rate, serverPer100k, clientPerMsg)
}

// cpuMark is the server's and this process's CPU time at one moment,
// read from a handler's goroutine.
type cpuMark struct {
	server, client atomic.Int64
	err            atomic.Value
}

func (m *cpuMark) read(serverPid int) {
	s, err := natstest.ProcessCPU(serverPid)
	c, err2 := natstest.ProcessCPU(0)
	if err == nil {
		err = err2
	}
	if err != nil {
		m.err.Store(err)
	}
	m.server.Store(int64(s))
	m.client.Store(int64(c))
}

// since is the server's and this process's CPU time from start to m.
func (m *cpuMark) since(b *testing.B, start *cpuMark) (server, client time.Duration) {
	b.Helper()
	for _, e := range []*cpuMark{start, m} {
		if err, _ := e.err.Load().(error); err != nil {
			b.Fatal(err)
		}
	}
	return time.Duration(m.server.Load() - start.server.Load()), time.Duration(m.client.Load() - start.client.Load())
}

// drainLimit allows a drain at 100 msg/s, a quarter of the slowest rate
// the issue measured, and at least 5 minutes.
func drainLimit(msgs int) time.Duration {
	return max(5*time.Minute, time.Duration(msgs/100)*time.Second)
}

// publishBacklog publishes msgs messages round-robin over the lanes (four
// keys per lane, in turn), with acks in flight, and waits until the
// stream holds them all.
func publishBacklog(b *testing.B, url string, p *planner.Plan, msgs int) {
	b.Helper()
	nc, js, err := connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	subjects := subjectsPerLane(b, p, 4)
	const window = 2000 // below the client's 4,000 acks in flight: PublishAsync never stalls
	for i := range msgs {
		lane := i % len(subjects)
		if _, err := js.PublishAsync(subjects[lane][(i/len(subjects))%4], []byte("m")); err != nil {
			b.Fatal(err)
		}
		if (i+1)%window == 0 || i == msgs-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("async publishes not acknowledged within a minute")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, p.Stream.Name)
	if err != nil {
		b.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(msgs) {
		b.Fatalf("stream %s holds %d messages, want %d (publishes failed)", p.Stream.Name, got, msgs)
	}
}

// subjectsPerLane finds perLane publish subjects for every lane of p,
// trying keys k0, k1, ... once each (natstest.SubjectsFor starts over
// for every lane: too slow at 16,384).
func subjectsPerLane(b *testing.B, p *planner.Plan, perLane int) [][]string {
	b.Helper()
	out := make([][]string, len(p.Lanes))
	missing := len(p.Lanes)
	for i := 0; missing > 0; i++ {
		if i > 100*perLane*len(p.Lanes)+1_000_000 {
			b.Fatalf("no %d keys for every lane of %d", perLane, len(p.Lanes))
		}
		s := "scale.received_from.k" + strconv.Itoa(i)
		lane, ok := p.Layout.PartitionOf([]byte(s))
		if !ok {
			b.Fatalf("%s does not match the design's subject %s", s, p.Design.Subject)
		}
		if len(out[lane]) < perLane {
			if out[lane] = append(out[lane], s); len(out[lane]) == perLane {
				missing--
			}
		}
	}
	return out
}

// runWorker runs the work package on p's lanes, on a connection of its
// own, until done is closed, then stops it.
func runWorker(b *testing.B, url string, p *planner.Plan, h work.Handler, done <-chan struct{}, limit time.Duration) {
	b.Helper()
	nc, js, err := connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	w, err := work.New(js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "scalebench"}, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	select {
	case <-done:
	case err := <-ended:
		b.Fatalf("worker ended: %v", err)
	case <-time.After(limit):
		b.Fatalf("not drained in %s", limit)
	}
	cancel()
	if err := <-ended; err != nil {
		b.Fatal(err)
	}
}
