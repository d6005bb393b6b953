package work

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// keysInFlight makes a design's lanes key-parallel.
func keysInFlight(k int, ackWait time.Duration) func(*planner.Design) {
	return func(d *planner.Design) {
		d.Lane.KeysInFlight = k
		if ackWait > 0 {
			d.Lane.AckWait = planner.Duration(ackWait)
		}
	}
}

// keysOn finds n keys of lane partition of p.
func keysOn(t testing.TB, p *planner.Plan, partition, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n && i < 1_000_000; i++ {
		k := fmt.Sprintf("k%d", i)
		s, err := p.SubjectForKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := p.LaneOf(s); l.Partition == partition {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("found %d keys of partition %d, want %d", len(keys), partition, n)
	}
	return keys
}

// A key-parallel lane runs distinct keys at once: with K=4 and eight keys
// on one lane, four handlers are seen running together (each first
// message waits until four run), and the judge finds every key in order.
// The lane's pin (Nats-Pin-Id) is not among the headers a handler gets.
func TestKeyParallelRunsKeysAtOnce(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, keysInFlight(4, 0))
	run := ordercheck.New(t, p, keysOn(t, p, 0, 8), 5, func(string) time.Duration { return time.Millisecond })
	var mu sync.Mutex
	running, peak := 0, 0
	four := make(chan struct{})
	var once sync.Once
	h := HandlerFunc(func(ctx context.Context, m *Msg) error {
		if pin := m.Header.Get("Nats-Pin-Id"); pin != "" {
			t.Errorf("seq %d: the handler sees the lane's pin %q", m.Seq, pin)
		}
		mu.Lock()
		running++
		peak = max(peak, running)
		if running == 4 {
			once.Do(func() { close(four) })
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if m.Seq <= 4 {
			select { // the first four wait for each other: they must run at once
			case <-four:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !run.Execute(ctx, "a", m.Partition, m.Seq) {
			return ctx.Err()
		}
		return nil
	})
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, h)
	run.Publish(context.Background(), t, js, 0)
	testutil.WaitFor(t, "every message acked", 30*time.Second, func() bool { return w.w.Stats().Processed == 40 })
	run.Check(t)
	mu.Lock()
	defer mu.Unlock()
	if peak < 4 || peak > 4 {
		t.Errorf("at most %d handlers ran at once, want 4 (K)", peak)
	}
}

// A failing key holds only its own messages: the other keys of its lane
// go on, until its waiting messages fill the window; the window then
// names it as the key holding the lane. Four keys, round robin, the first
// failing: with K=4 its three messages leave a place for the others, and
// all of them finish; with K=3 its three messages fill the window once
// the others' first two rounds are done.
func TestFailingKeyStopsOnlyItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k, processed int
		holds        bool
	}{{4, 9, false}, {3, 6, true}} {
		t.Run(fmt.Sprintf("K=%d", tc.k), func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 1, keysInFlight(tc.k, 0))
			keys := keysOn(t, p, 0, 4)
			bad := keys[0]
			run := ordercheck.New(t, p, keys, 3, func(string) time.Duration { return time.Millisecond })
			h := HandlerFunc(func(ctx context.Context, m *Msg) error {
				if m.Key == bad {
					return RetryAfter(100*time.Millisecond, errors.New("bad key"))
				}
				if !run.Execute(ctx, "a", m.Partition, m.Seq) {
					return ctx.Err()
				}
				return nil
			})
			w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, h)
			run.Publish(context.Background(), t, js, 0)
			testutil.WaitFor(t, "the other keys' messages done, the bad key's held", 30*time.Second, func() bool {
				win := laneWindow(w, p.Lanes[0].Name)
				return win != nil && win.Held == 3 && w.w.Stats().Processed == uint64(tc.processed) && (win.Holder == bad) == tc.holds
			})
			if win := laneWindow(w, p.Lanes[0].Name); tc.holds != (win.Holder == bad) || !tc.holds && win.Holder != "" {
				t.Errorf("the window's holder is %q, want %q", win.Holder, map[bool]string{true: bad}[tc.holds])
			}
			if res := run.Rec.Result(); res.OrderViolations != 0 || res.Unfinished != 12-tc.processed {
				t.Errorf("%d violations, %d unfinished: want 0 and %d", res.OrderViolations, res.Unfinished, 12-tc.processed)
			}
		})
	}
}

func laneWindow(s *started, lane string) *windowView {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	st := s.w.stats[lane]
	if st == nil {
		return nil
	}
	if win := st.window.Load(); win != nil {
		return &windowView{Holder: win.Holder, Held: win.Held}
	}
	return nil
}

type windowView struct {
	Holder string
	Held   int
}

// TestTakeOverWaitsForTheMessagesOut is the fence of key-parallel lanes:
// instance a holds alice's first three messages (the first one running,
// the others waiting behind it) when it is killed; b takes the lane and
// then gets alice's fourth message, new, while the first three are still
// out with a (their ack wait is 10s). b must run nothing until they came
// back to it: the judge finds every key in order. Without the fence
// (noFence) b runs alice's fourth message first, and the judge counts
// the violation: the test shows the fence is what keeps the order.
func TestTakeOverWaitsForTheMessagesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out a 10s ack wait")
	}
	t.Parallel()
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "fenced", false: "without the fence"}[fenced], func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 1, keysInFlight(8, 10*time.Second))
			keys := keysOn(t, p, 0, 2)
			alice := keys[0]
			run := ordercheck.New(t, p, keys, 6, func(instance string) time.Duration {
				if instance == "a/alice" {
					return time.Hour // runs until a dies
				}
				return time.Millisecond
			})
			aHandler := HandlerFunc(func(ctx context.Context, m *Msg) error {
				who := "a"
				if m.Key == alice {
					who = "a/alice"
				}
				if !run.Execute(ctx, who, m.Partition, m.Seq) {
					return ctx.Err()
				}
				return nil
			})
			cfg := func(name string) Config {
				return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second, noFence: !fenced}
			}
			a := startWorker(t, s.URL(), cfg("a"), aHandler)
			run.PublishRange(context.Background(), t, js, 0, 6, 0) // alice 1-3 and bob 1-3, round robin
			testutil.WaitFor(t, "a holding alice's three messages, bob's acked", 20*time.Second, func() bool {
				win := laneWindow(a, p.Lanes[0].Name)
				return win != nil && win.Held == 3 && a.w.Stats().Processed == 3
			})
			a.kill(t)
			b := startWorker(t, s.URL(), cfg("b"), judged(run, "b"))
			testutil.WaitFor(t, "b serving the lane", 20*time.Second, func() bool { return settled(p, 1, 1, b) })
			run.PublishRange(context.Background(), t, js, 6, 12, 0)
			testutil.WaitFor(t, "every message", 60*time.Second, run.Done)
			res := run.Rec.Result()
			if !fenced {
				if res.OrderViolations == 0 {
					t.Errorf("no violation without the fence: the test does not show what the fence does (%s)", ordercheck.Summary(res))
				}
				return
			}
			run.Check(t)
			if res.Redeliveries == 0 {
				t.Error("alice's first message was never run again after a died")
			}
		})
	}
}

// On a key-parallel lane, --on-poison park parks the failing message and
// its key goes on: the bad key's later messages run after it, in order,
// and every other key finishes.
func TestKeyParallelParkLetsTheKeyGoOn(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, keysInFlight(4, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	keys := keysOn(t, p, 0, 4)
	bad := keys[0]
	run := ordercheck.New(t, p, keys, 3, func(string) time.Duration { return time.Millisecond })
	h := HandlerFunc(func(ctx context.Context, m *Msg) error {
		if m.Key == bad && m.Seq == 1 {
			if m.Attempt == 2 {
				// Parked after this attempt: for the promise, handled
				// (the judge's predecessor rule counts it as done).
				run.Execute(ctx, "a", m.Partition, m.Seq)
			}
			return errors.New("poison")
		}
		if !run.Execute(ctx, "a", m.Partition, m.Seq) {
			return ctx.Err()
		}
		return nil
	})
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", OnPoison: Park, DeadLetter: "dlq.orders", ParkAfter: 2}, h)
	run.Publish(context.Background(), t, js, 0)
	testutil.WaitFor(t, "11 processed, 1 parked", 30*time.Second, func() bool {
		st := w.w.Stats()
		return st.Processed == 11 && st.Parked == 1
	})
	res := run.Rec.Result()
	if res.OrderViolations != 0 || res.Unfinished != 0 {
		t.Errorf("%d violations, %d unfinished: want none", res.OrderViolations, res.Unfinished)
	}
	dlq, err := js.Stream(ctx, "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dlq.GetMsg(ctx, 1); err != nil || m.Header.Get(HeaderParkedSeq) != "1" || m.Header.Get(HeaderParkedKey) != bad {
		t.Errorf("parked message %v: %v", m, err)
	}
}
