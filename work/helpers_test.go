package work

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// call is one handler run as a recorder saw it.
type call struct {
	instance   string
	lane       string
	key        string
	seq        uint64
	attempt    int
	start, end time.Time
}

// recorder records every call; handlers are made from it.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) handler(instance string, work func(ctx context.Context, m *Msg) error) Handler {
	return HandlerFunc(func(ctx context.Context, m *Msg) error {
		c := call{instance: instance, lane: m.Lane, key: m.Key, seq: m.Seq, attempt: m.Attempt, start: time.Now()}
		var err error
		if work != nil {
			err = work(ctx, m)
		}
		c.end = time.Now()
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
		return err
	})
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// seqs returns the distinct sequences processed.
func (r *recorder) seqs() map[uint64]int {
	out := map[uint64]int{}
	for _, c := range r.snapshot() {
		out[c.seq]++
	}
	return out
}

// consumerInfo reads a lane's consumer info from the server.
func consumerInfo(t testing.TB, js jetstream.JetStream, stream, lane string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, lane)
	if err != nil {
		t.Fatalf("consumer %s: %v", lane, err)
	}
	return c.CachedInfo()
}

// listingsOf counts the CONSUMER.LIST requests made on stream from now
// on (the workers' listings of the lanes), as the server receives them.
func listingsOf(t testing.TB, nc *nats.Conn, stream string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe("$JS.API.CONSUMER.LIST."+stream, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// checkOrder fails the test when a key's messages ran out of order or
// when two calls of one lane overlapped in time. A redelivery (a
// sequence seen again) is allowed only when allowed says so.
func checkOrder(t testing.TB, calls []call, allowRedelivery bool) {
	t.Helper()
	lastSeq := map[string]uint64{}
	for _, c := range sortedByStart(calls) {
		if prev, ok := lastSeq[c.key]; ok {
			if c.seq < prev || (c.seq == prev && !allowRedelivery) {
				t.Errorf("key %s: seq %d started after seq %d", c.key, c.seq, prev)
			}
		}
		lastSeq[c.key] = max(lastSeq[c.key], c.seq)
	}
	byLane := map[string][]call{}
	for _, c := range calls {
		byLane[c.lane] = append(byLane[c.lane], c)
	}
	for lane, cs := range byLane {
		cs = sortedByStart(cs)
		for i := 1; i < len(cs); i++ {
			if cs[i].start.Before(cs[i-1].end) {
				t.Errorf("lane %s: seq %d on %s started at %s before seq %d on %s ended at %s",
					lane, cs[i].seq, cs[i].instance, cs[i].start.Format("15:04:05.000000"), cs[i-1].seq, cs[i-1].instance, cs[i-1].end.Format("15:04:05.000000"))
			}
		}
	}
}

func sortedByStart(calls []call) []call {
	out := append([]call(nil), calls...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start.Before(out[j-1].start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// setup starts a server and creates a design's stream and lanes.
func setup(t testing.TB, name string, partitions int, edit ...func(*planner.Design)) (*natstest.Server, *nats.Conn, jetstream.JetStream, *planner.Plan) {
	t.Helper()
	s := natstest.Start(t)
	nc, js := natstest.Connect(t, s.URL())
	p := testutil.Plan(t, name, partitions, edit...)
	natstest.CreateLanes(t, js, p)
	return s, nc, js, p
}

// publishKeys publishes n messages per key, round robin over keys.
func publishKeys(t testing.TB, js jetstream.JetStream, p *planner.Plan, keys, n int) {
	t.Helper()
	var subjects []string
	for i := 0; i < n; i++ {
		for k := 0; k < keys; k++ {
			s, err := p.SubjectForKey(fmt.Sprintf("k%d", k))
			if err != nil {
				t.Fatal(err)
			}
			subjects = append(subjects, s)
		}
	}
	natstest.PublishAsync(t, js, subjects...)
}

// started runs a worker until the test ends (or stop is called) and
// returns its result channel.
type started struct {
	w    *Worker
	nc   *nats.Conn
	stop context.CancelFunc
	err  chan error
}

func startWorker(t testing.TB, url string, cfg Config, h Handler) *started {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("i", cfg.Instance)
	} else if cfg.Logger == nil {
		cfg.Logger = lastLines(t, cfg.Instance)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{w: w, nc: nc, stop: cancel, err: make(chan error, 1)}
	go func() { s.err <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.err:
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s did not stop", cfg.Instance)
		}
	})
	return s
}

// wait stops the worker and returns Run's result.
func (s *started) wait(t testing.TB) error {
	t.Helper()
	s.stop()
	select {
	case err := <-s.err:
		s.err <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop within 30s")
		return nil
	}
}

// kill makes the worker vanish like a killed process: its connection
// closes first, so it cannot leave the membership or settle anything.
func (s *started) kill(t testing.TB) {
	t.Helper()
	s.nc.Close()
	s.w.Abort()
	s.wait(t)
}

// serving returns which instance serves each lane, as the workers say.
func serving(workers ...*started) map[string][]string {
	out := map[string][]string{}
	for _, s := range workers {
		s.w.mu.Lock()
		for name, l := range s.w.running {
			if !l.releasing() {
				out[name] = append(out[name], s.w.cfg.Instance)
			}
		}
		s.w.mu.Unlock()
	}
	return out
}

// settled: every lane of p is served by exactly one of the workers, and
// each worker serves between lo and hi lanes.
func settled(p *planner.Plan, lo, hi int, workers ...*started) bool {
	sv := serving(workers...)
	perInstance := map[string]int{}
	for _, l := range p.Lanes {
		if len(sv[l.Name]) != 1 {
			return false
		}
		perInstance[sv[l.Name][0]]++
	}
	for _, s := range workers {
		n := perInstance[s.w.cfg.Instance]
		if n < lo || n > hi {
			return false
		}
	}
	return true
}

// lastLines is a logger that keeps an instance's last 200 lines (info
// and above) and prints them if the test fails, and the lanes' state at
// the server with them: what a stall or a flake on a loaded CI machine
// needs to be understood.
func lastLines(t testing.TB, instance string) *slog.Logger {
	r := &ring{max: 200}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("instance %s, its last log lines:\n%s", instance, r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo})).With("i", instance)
}

// ring keeps the last max lines written to it.
type ring struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, string(p))
	if len(r.lines) > r.max {
		r.lines = r.lines[len(r.lines)-r.max:]
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, l := range r.lines {
		b.WriteString(l)
	}
	return b.String()
}

// lanesAtServer logs, if the test failed, every lane of the stream as the
// server sees it (pending, out, waiting requests, pin, pause). Call it
// after the server started: cleanups run last-in first-out, so the server
// is still up.
func lanesAtServer(t testing.TB, js jetstream.JetStream, stream string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Logf("lanes at the server: %v", err)
			return
		}
		var b strings.Builder
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			pin := ""
			for _, g := range ci.PriorityGroups {
				pin += g.PinnedClientID
			}
			fmt.Fprintf(&b, "%s: pending %d, ack pending %d, redelivered %d, waiting %d, delivered %d/%d, ack floor %d/%d, max ack pending %d, pin %q, paused %v\n",
				ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered.Consumer, ci.Delivered.Stream,
				ci.AckFloor.Consumer, ci.AckFloor.Stream, ci.Config.MaxAckPending, pin, ci.Paused)
		}
		if err := l.Err(); err != nil {
			fmt.Fprintf(&b, "listing: %v\n", err)
		}
		t.Logf("lanes at the server:\n%s", b.String())
	})
}
