package work_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
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

// The benchmarks of key-parallel lanes (lane.keys_in_flight: K), each
// against serial lanes on the same backlog, taken in turns on one server
// (issue 17, "How it will be judged"):
//
//	go test ./work -run '^$' -bench KeyParallel -benchtime 1x
//
// Each also reports the messages that ran before an earlier message of
// their key that had not run yet ("order-violations"): figures of a run
// that broke the promise of key-parallel lanes are not figures of them.

// shape is one side of a comparison: lanes lanes with keys in flight k (1:
// serial), or, with bare set, serial lanes that let k messages out, for a
// bare pull-and-ack loop without a key gate.
type shape struct {
	lanes, k int
	bare     bool
}

// keyedBacklog creates the design name of shape s and stores n messages
// whose keys are drawn uniformly from k0 .. k<keys-1> by a fixed seed:
// every design of a comparison gets the same keys in the same order. It
// returns once every lane counts its messages pending.
func keyedBacklog(b *testing.B, js jetstream.JetStream, name string, s shape, keys, n int) *planner.Plan {
	b.Helper()
	var edit []func(*planner.Design)
	var change []func(*jetstream.ConsumerConfig)
	switch {
	case s.bare:
		change = append(change, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = s.k })
	case s.k > 1:
		edit = append(edit, func(d *planner.Design) { d.Lane.KeysInFlight = s.k })
	}
	p := testutil.Plan(b, name, s.lanes, edit...)
	natstest.CreateLanes(b, js, p, change...)
	rng := rand.New(rand.NewPCG(17, 17))
	subjects := make([]string, n)
	perLane := make([]uint64, len(p.Lanes))
	for i := range subjects {
		subjects[i] = name + ".received_from.k" + strconv.Itoa(rng.IntN(keys))
		part, ok := p.Layout.PartitionOf([]byte(subjects[i]))
		if !ok {
			b.Fatalf("%s is not a subject of the design", subjects[i])
		}
		perLane[part]++
	}
	for len(subjects) > 0 { // in parts: more acks out than nats.go allows (4,000) stall
		part := subjects[:min(len(subjects), 2000)]
		natstest.PublishAsync(b, js, part...)
		subjects = subjects[len(part):]
	}
	for _, l := range p.Lanes {
		natstest.WaitPending(b, js, p.Stream.Name, l.Name, perLane[l.Partition])
	}
	return p
}

// oneMilli is a handler that works 1 ms. It sleeps on a timerfd (see
// internal/clock): Go's timers fire up to 1 ms late in a process that
// idles between them, which would measure the runtime, not the lanes.
func oneMilli() work.Handler {
	clocks := sync.Pool{New: func() any { return clock.New() }}
	return work.HandlerFunc(func(context.Context, *work.Msg) error {
		c := clocks.Get().(*clock.Clock)
		c.Sleep(time.Millisecond)
		clocks.Put(c)
		return nil
	})
}

// judged runs a handler (nil: none), timing it, and counts the messages
// that start after a later message of their key started, without having
// run before: what key-parallel lanes promise never happens.
type judged struct {
	inner      work.Handler
	mu         sync.Mutex
	last       map[string]uint64 // per key, the highest sequence started
	ran        map[uint64]bool
	violations int
	took, n    atomic.Int64
}

func judge(inner work.Handler) *judged {
	return &judged{inner: inner, last: map[string]uint64{}, ran: map[uint64]bool{}}
}

func (j *judged) Handle(ctx context.Context, m *work.Msg) error {
	j.mu.Lock()
	if j.last[m.Key] > m.Seq && !j.ran[m.Seq] {
		j.violations++
	}
	j.ran[m.Seq] = true
	j.last[m.Key] = max(j.last[m.Key], m.Seq)
	j.mu.Unlock()
	if j.inner == nil {
		return nil
	}
	start := time.Now()
	err := j.inner.Handle(ctx, m)
	j.took.Add(int64(time.Since(start)))
	j.n.Add(1)
	return err
}

// meanTook is the handler's mean time, in µs: on a loaded machine a 1 ms
// sleep wakes late.
func (j *judged) meanTook() float64 {
	return float64(j.took.Load()) / float64(max(j.n.Load(), 1)) / 1e3
}

// drainBare drains a lane that lets k messages out with a bare loop:
// one pull request for k messages at a time, each message run in a
// goroutine of its own and acked with a confirmed ack (the runtime waits
// for the ack's answer too), no key gate. It is what the server and this
// machine allow k messages out, whatever the runtime does. light is the
// lightest loop there is: one standing request (4,096 messages), acks
// sent and not confirmed.
func drainBare(b *testing.B, url string, p *planner.Plan, total, k int, inner work.Handler, light bool) float64 {
	nc, _ := natstest.Connect(b, url)
	defer nc.Close()
	var sp worktest.Span
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 4*k+64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	next := "$JS.API.CONSUMER.MSG.NEXT." + p.Stream.Name + "." + p.Lanes[0].Name
	batch := k
	if light {
		batch = 4096
	}
	req := []byte(`{"batch":` + strconv.Itoa(batch) + `,"expires":5000000000}`)
	left := 0
	pull := func() {
		if err := nc.PublishRequest(next, inbox, req); err != nil {
			b.Fatal(err)
		}
		left = batch
	}
	done := make(chan struct{})
	failed := make(chan error, 1)
	pull()
	for {
		select {
		case <-done:
			if n, _ := sub.Dropped(); n > 0 {
				b.Fatalf("the bare loop dropped %d messages", n)
			}
			return sp.Rate()
		case err := <-failed:
			b.Fatal(err)
		case m := <-ch:
			if m.Header.Get("Status") != "" {
				pull() // the request expired
				continue
			}
			go func() {
				if inner != nil {
					_ = inner.Handle(context.Background(), nil)
				}
				var err error
				if light {
					err = m.Respond([]byte("+ACK"))
				} else {
					_, err = nc.Request(m.Reply, []byte("+ACK"), 10*time.Second)
				}
				if err != nil {
					select {
					case failed <- err:
					default:
					}
					return
				}
				if sp.Tick() == int64(total) {
					close(done)
				}
			}()
			if left--; left == 0 {
				pull()
			}
		}
	}
}

// BenchmarkKeyParallelHandler: one lane with keys in flight 32 against one
// serial lane, a 1 ms handler, the same backlog (10,000 messages over
// 1,000 keys). The issue asks for at least 25x. A lane runs at most 32 at
// once, and each message takes its handler's time plus its confirmed ack
// and the next delivery: the ceiling is under 32x. The bare loop (see
// drainBare) with 32 out is what the server and the machine allow.
//
//	go test ./work -run '^$' -bench KeyParallelHandler -benchtime 3x
func BenchmarkKeyParallelHandler(b *testing.B) {
	keyParallelVsSerial(b, 10000, oneMilli)
}

// BenchmarkKeyParallelNoop: the no-op drain of one lane with keys in
// flight 32 against one serial lane, the same backlog (30,000 messages
// over 1,000 keys). The issue asks for at least 3x.
//
//	go test ./work -run '^$' -bench KeyParallelNoop -benchtime 3x
func BenchmarkKeyParallelNoop(b *testing.B) {
	keyParallelVsSerial(b, 30000, nil)
}

func keyParallelVsSerial(b *testing.B, n int, handler func() work.Handler) {
	const keys, k = 1000, 32
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.URL())
	natstest.KeepAccountStreams(b, js)
	var inner work.Handler
	if handler != nil {
		inner = handler()
	}
	var serial, keyed, bare, light, serialTook, keyedTook []float64
	violations := 0
	i := 0
	for b.Loop() {
		for _, sh := range []shape{{1, 1, false}, {1, k, false}, {1, k, true}, {1, k, true}} {
			i++
			p := keyedBacklog(b, js, fmt.Sprintf("kp%d", i), sh, keys, n)
			if sh.bare {
				if len(bare) == len(light) {
					bare = append(bare, drainBare(b, s.URL(), p, n, k, inner, false))
				} else {
					light = append(light, drainBare(b, s.URL(), p, n, k, inner, true))
				}
				worktest.DropStream(b, js, p.Stream.Name)
				continue
			}
			j := judge(inner)
			r := worktest.Drain(b, s.URL(), p, n, j)
			violations += j.violations
			if sh.k == 1 {
				serial, serialTook = append(serial, r), append(serialTook, j.meanTook())
			} else {
				keyed, keyedTook = append(keyed, r), append(keyedTook, j.meanTook())
			}
			worktest.DropStream(b, js, p.Stream.Name)
		}
	}
	m := worktest.Median
	b.ReportMetric(m(serial), "serial-msgs/s")
	b.ReportMetric(m(keyed), "k32-msgs/s")
	b.ReportMetric(m(keyed)/m(serial), "x-serial")
	b.ReportMetric(m(bare), "bare-k32-msgs/s")
	b.ReportMetric(m(keyed)/m(bare), "x-bare")
	b.ReportMetric(m(light)/m(serial), "light-k32-x-serial")
	b.ReportMetric(float64(violations), "order-violations")
	if handler != nil {
		b.ReportMetric(m(serialTook), "serial-handler-us")
		b.ReportMetric(m(keyedTook), "k32-handler-us")
	}
	b.Logf("msgs/s: serial %v, keys in flight 32 %v, bare loop with 32 out %v, lightest loop %v", serial, keyed, bare, light)
	if handler != nil {
		b.Logf("handler µs: serial %v, keys in flight 32 %v", serialTook, keyedTook)
	}
	if violations > 0 {
		b.Logf("ORDER VIOLATIONS: %d", violations)
	}
}

// BenchmarkKeyParallelVsLanes: 16 lanes with keys in flight 64 against
// 1,024 serial lanes (at most 1,024 messages out either way), a 1 ms
// handler, the same backlog: 16,384 messages over 4,096 keys (4 keys per
// serial lane on average, so that nearly every serial lane has work; 256
// per key-parallel lane). The issue asks for at least 2x the messages per
// second for at most 0.25x the nats-server's CPU per message.
//
// The server's CPU is read from /proc/<pid>/stat of a server process of
// its own (this test binary re-executed: natstest.StartProcess). The
// workers run in the benchmark's process, so the process's CPU would
// count them too had the server been embedded there, and Go cannot tell
// one goroutine's CPU from another's. The client's CPU (this process: the
// workers, the handlers' timers, the benchmark's bookkeeping) is reported
// beside it. Both are taken between the first and the last message
// handled, as the rate is, so that creating lanes, publishing the backlog
// and the workers' start and stop are left out.
//
// One turn (both sides) takes 15-30 s, most of it the 1,024 serial
// lanes; about 2 minutes while key-parallel lanes lose deliveries (see
// docs/performance.md): a lost one holds its slot until the ack wait.
//
//	go test ./work -run '^$' -bench KeyParallelVsLanes -benchtime 1x
func BenchmarkKeyParallelVsLanes(b *testing.B) {
	const keys, n = 4096, 16384
	srv := natstest.StartProcess(b)
	_, js := natstest.Connect(b, srv.URL())
	natstest.KeepAccountStreams(b, js)
	inner := oneMilli()
	type runs struct{ rate, server, client, took []float64 }
	var keyed, serial runs
	violations := 0
	i := 0
	for b.Loop() {
		for _, sh := range []shape{{16, 64, false}, {1024, 1, false}} {
			i++
			p := keyedBacklog(b, js, fmt.Sprintf("kw%d", i), sh, keys, n)
			j := judge(inner)
			d := drainCPU(b, srv, p, n, j)
			violations += j.violations
			r := &serial
			if sh.k > 1 {
				r = &keyed
			}
			r.rate = append(r.rate, d.rate)
			r.server = append(r.server, d.server)
			r.client = append(r.client, d.client)
			r.took = append(r.took, j.meanTook())
			worktest.DropStream(b, js, p.Stream.Name)
		}
	}
	m := worktest.Median
	b.ReportMetric(m(serial.rate), "1024-serial-msgs/s")
	b.ReportMetric(m(keyed.rate), "16-k64-msgs/s")
	b.ReportMetric(m(keyed.rate)/m(serial.rate), "x-msgs/s")
	b.ReportMetric(m(serial.server), "1024-serial-server-us/msg")
	b.ReportMetric(m(keyed.server), "16-k64-server-us/msg")
	b.ReportMetric(m(keyed.server)/m(serial.server), "x-server-cpu/msg")
	b.ReportMetric(m(serial.client), "1024-serial-client-us/msg")
	b.ReportMetric(m(keyed.client), "16-k64-client-us/msg")
	b.ReportMetric(float64(violations), "order-violations")
	b.Logf("1,024 serial lanes: msgs/s %v, server µs/msg %v, client µs/msg %v, handler µs %v", serial.rate, serial.server, serial.client, serial.took)
	b.Logf("16 lanes, K=64: msgs/s %v, server µs/msg %v, client µs/msg %v, handler µs %v", keyed.rate, keyed.server, keyed.client, keyed.took)
	if violations > 0 {
		b.Logf("ORDER VIOLATIONS: %d", violations)
	}
}

// drained is a drain's rate and CPU per message (µs) of the server and of
// this process, between its first and its last message.
type drained struct{ rate, server, client float64 }

// drainCPU is worktest.Drain that also reads the server process's CPU
// time and this process's at the first and the last message handled.
func drainCPU(b *testing.B, srv *natstest.Process, p *planner.Plan, total int, inner work.Handler) drained {
	var sp worktest.Span
	var s0, c0, s1, c1 atomic.Int64
	var cpuErr atomic.Value
	read := func(s, c *atomic.Int64) {
		sc, err := natstest.ProcessCPU(srv.Pid())
		cc, err2 := natstest.ProcessCPU(0)
		if err == nil {
			err = err2
		}
		if err != nil {
			cpuErr.Store(err)
		}
		s.Store(int64(sc))
		c.Store(int64(cc))
	}
	done := make(chan struct{})
	h := work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
		if err := inner.Handle(ctx, m); err != nil {
			return err
		}
		switch sp.Tick() {
		case 1:
			read(&s0, &c0)
		case int64(total):
			read(&s1, &c1)
			close(done)
		}
		return nil
	})
	worktest.RunUntil(b, srv.URL(), p, h, done)
	if err, _ := cpuErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	per := func(d int64) float64 { return float64(d) / float64(total-1) / 1e3 }
	return drained{rate: sp.Rate(), server: per(s1.Load() - s0.Load()), client: per(c1.Load() - c0.Load())}
}
