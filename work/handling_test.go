package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

func ackWait(d time.Duration) func(*planner.Design) {
	return func(dd *planner.Design) { dd.Lane.AckWait = planner.Duration(d) }
}

// TestSlowerThanAckWait: a handler that runs 3x the ack wait is not
// redelivered: the in-progress acks restart the ack wait.
func TestSlowerThanAckWait(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: handlers of 3s, three ack waits each, 6s")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 2, ackWait(time.Second))
	publishKeys(t, js, p, 2, 2)
	rec := &recorder{}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		rec.handler("a", func(ctx context.Context, m *Msg) error { time.Sleep(3 * time.Second); return nil }))
	testutil.WaitFor(t, "4 messages", 30*time.Second, func() bool { return len(rec.seqs()) == 4 })
	// Once every message is acked nothing can come again; what the server
	// delivered until then (redeliveries count) is the proof, not a pause.
	var delivered, redelivered uint64
	testutil.WaitFor(t, "every lane acked", 10*time.Second, func() bool {
		delivered, redelivered = 0, 0
		for _, l := range p.Lanes {
			info := consumerInfo(t, js, p.Stream.Name, l.Name)
			if info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
			delivered += info.Delivered.Consumer
			redelivered += uint64(info.NumRedelivered)
		}
		return true
	})
	if delivered != 4 || redelivered != 0 {
		t.Errorf("the server delivered %d times (%d redelivered) for 4 messages: redelivered despite in-progress acks", delivered, redelivered)
	}
	for _, c := range rec.snapshot() {
		if c.attempt != 1 {
			t.Errorf("seq %d ran as attempt %d: redelivered despite in-progress acks", c.seq, c.attempt)
		}
	}
	if n := len(rec.snapshot()); n != 4 {
		t.Errorf("%d calls for 4 messages", n)
	}
	_ = w
}

// TestMaxProcessTime: a handler that hangs is cancelled at the max process
// time, the message is redelivered after the lane's backoff, and the next
// attempt completes.
func TestMaxProcessTime(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, func(d *planner.Design) { d.Lane.BackOff = []planner.Duration{planner.Duration(200 * time.Millisecond)} })
	publishKeys(t, js, p, 1, 1)
	rec := &recorder{}
	var cancelled atomic.Bool
	startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", MaxProcessTime: 300 * time.Millisecond},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			if m.Attempt == 1 {
				<-ctx.Done() // hangs until cancelled
				cancelled.Store(errors.Is(context.Cause(ctx), errMaxProcessTime))
				return ctx.Err()
			}
			return nil
		}))
	testutil.WaitFor(t, "the second attempt", 10*time.Second, func() bool { return len(rec.snapshot()) == 2 })
	calls := rec.snapshot()
	if !cancelled.Load() {
		t.Error("the hung handler's context did not end with the max process time")
	}
	if took := calls[0].end.Sub(calls[0].start); took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("first attempt ran %s, want about 300ms", took)
	}
	if gap := calls[1].start.Sub(calls[0].end); gap < 150*time.Millisecond || gap > 2*time.Second {
		t.Errorf("redelivered %s after the failure, want about the 200ms backoff", gap)
	}
}

// TestBackoffSchedule: failures are retried after the lane's backoff for
// that attempt (the nak delay is computed so the server waits exactly
// that), or after the built-in schedule (1s, 2s, ...) without one.
func TestBackoffSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the retry schedule of 1s and 2s, 3s")
	}
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backoff []time.Duration
		want    []time.Duration
	}{
		{"backoff", []time.Duration{300 * time.Millisecond, 900 * time.Millisecond, 600 * time.Millisecond}, []time.Duration{300 * time.Millisecond, 900 * time.Millisecond, 600 * time.Millisecond}},
		{"none", nil, []time.Duration{time.Second, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 1, func(d *planner.Design) {
				for _, b := range tc.backoff {
					d.Lane.BackOff = append(d.Lane.BackOff, planner.Duration(b))
				}
			})
			publishKeys(t, js, p, 1, 1)
			rec := &recorder{}
			startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
				rec.handler("a", func(ctx context.Context, m *Msg) error {
					if m.Attempt <= len(tc.want) {
						return fmt.Errorf("fail %d", m.Attempt)
					}
					return nil
				}))
			testutil.WaitFor(t, "every attempt", 20*time.Second, func() bool { return len(rec.snapshot()) == len(tc.want)+1 })
			calls := rec.snapshot()
			for i, want := range tc.want {
				gap := calls[i+1].start.Sub(calls[i].end)
				if gap < want-100*time.Millisecond || gap > want+400*time.Millisecond {
					t.Errorf("attempt %d came %s after attempt %d failed, want %s", i+2, gap, i+1, want)
				}
			}
		})
	}
}

// TestPoisonBlock: under block (the default) a message that keeps failing
// holds its lane: the lane's later messages wait, other lanes go on.
func TestPoisonBlock(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 2, func(d *planner.Design) { d.Lane.BackOff = []planner.Duration{planner.Duration(100 * time.Millisecond)} })
	bad := natstest.SubjectsFor(t, p, 0, 1)[0]
	natstest.Publish(t, js, bad, bad, natstest.SubjectsFor(t, p, 1, 3)[0])
	rec := &recorder{}
	startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			if m.Seq == 1 {
				return errors.New("poison")
			}
			return nil
		}))
	testutil.WaitFor(t, "4 attempts of the poison message", 10*time.Second, func() bool { return rec.seqs()[1] >= 4 })
	got := rec.seqs()
	if got[2] != 0 {
		t.Error("seq 2 ran while seq 1, ahead of it in its lane, keeps failing")
	}
	if got[3] != 1 {
		t.Errorf("seq 3 on the other lane ran %d times, want 1", got[3])
	}
}

// TestPoisonPark: under park, a message failing --park-after times is
// republished to the dead-letter subject with its origin and last error,
// acked, and the lane moves on; CountParked counts it. A Term from the
// handler parks at once.
func TestPoisonPark(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, func(d *planner.Design) { d.Lane.BackOff = []planner.Duration{planner.Duration(50 * time.Millisecond)} })
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	subjects := natstest.SubjectsFor(t, p, 0, 3)
	natstest.Publish(t, js, subjects...)
	rec := &recorder{}
	startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", OnPoison: Park, DeadLetter: "dlq.orders", ParkAfter: 3},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			switch m.Seq {
			case 1:
				return errors.New("cannot parse line 3")
			case 2:
				return Term(errors.New("unknown customer"))
			}
			return nil
		}))
	testutil.WaitFor(t, "seq 3 processed", 10*time.Second, func() bool { return rec.seqs()[3] == 1 })
	if n := rec.seqs()[1]; n != 3 {
		t.Errorf("seq 1 ran %d times before it was parked, want 3", n)
	}
	if n := rec.seqs()[2]; n != 1 {
		t.Errorf("seq 2 ran %d times, want 1 (terminated at once)", n)
	}
	n, stream, ok, err := membership.CountParked(ctx, jsapi.New(connect.Around(js, 5*time.Second)), "dlq.orders")
	if err != nil || !ok || n != 2 || stream != "DLQ" {
		t.Fatalf("CountParked = %d %s %v %v, want 2 in DLQ", n, stream, ok, err)
	}
	// inspect finds the subject in the membership: in the instance's
	// lease, and in its lane records, which outlive it.
	sv, err := membership.ReadServing(ctx, js, p.Stream.Name, p.Design.Name)
	if err != nil || len(sv.Members) != 1 || sv.Members[0].DeadLetter != "dlq.orders" || sv.Lanes[p.Lanes[0].Name].DeadLetter != "dlq.orders" {
		t.Fatalf("the membership does not name the dead-letter subject: %+v, %v", sv, err)
	}
	dlq, _ := js.Stream(ctx, "DLQ")
	m, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		HeaderParkedStream: "ORDERS", HeaderParkedSeq: "1", HeaderParkedSubject: "orders.received_from.n1.0." + subjects[0][len("orders.received_from."):],
		HeaderParkedLane: p.Lanes[0].Name, HeaderParkedKey: subjects[0][len("orders.received_from."):], HeaderParkedAttempts: "3",
		HeaderParkedError: "cannot parse line 3", HeaderParkedInstance: "a",
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("parked header %s = %q, want %q", k, got, v)
		}
	}
	if string(m.Data) != "m" {
		t.Errorf("parked payload %q", m.Data)
	}
	m2, _ := dlq.GetMsg(ctx, 2)
	if r := m2.Header.Get(HeaderParkedReason); r != "terminated by the handler" {
		t.Errorf("second parked message's reason %q", r)
	}
	testutil.WaitFor(t, "the lane empty", 10*time.Second, func() bool {
		c, err := js.Consumer(ctx, "ORDERS", p.Lanes[0].Name)
		return err == nil && c.CachedInfo().NumAckPending == 0 && c.CachedInfo().NumPending == 0
	})
}

// TestTerm: without a dead-letter subject a Term from the handler
// terminates the message (+TERM) and the lane moves on.
func TestTerm(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 2)...)
	rec := &recorder{}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			if m.Seq == 1 {
				return Term(errors.New("bad"))
			}
			return nil
		}))
	testutil.WaitFor(t, "seq 2", 10*time.Second, func() bool { return rec.seqs()[2] == 1 })
	// A handler's end comes before its ack is confirmed, and counted.
	testutil.WaitFor(t, "seq 2 acked", 10*time.Second, func() bool { return w.w.Stats().Processed == 1 })
	if st := w.w.Stats(); st.Terminated != 1 || st.Processed != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestHeldLane: a paused lane (held by apply during a repartition) is
// pulled from, and its messages run the moment it is resumed.
func TestHeldLane(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	nc, js := natstest.Connect(t, s.URL())
	p := testutil.Plan(t, "orders", 1)
	until := time.Now().Add(time.Hour)
	natstest.CreateLanes(t, js, p, func(c *jetstream.ConsumerConfig) { c.PauseUntil = &until })
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 3)...)
	rec := &recorder{}
	startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, rec.handler("a", nil))
	// The worker pulls from the paused lane: its pull request waits there
	// beside the 3 messages, which the server would deliver at once if the
	// lane were not paused. Only then is "nothing ran" a finding.
	testutil.WaitFor(t, "the worker's pull request waiting on the paused lane", 10*time.Second, func() bool {
		info := consumerInfo(t, js, p.Stream.Name, p.Lanes[0].Name)
		return info.Paused && info.NumWaiting > 0 && info.NumPending == 3
	})
	if n := len(rec.snapshot()); n != 0 {
		t.Fatalf("%d messages ran on a paused lane", n)
	}
	resumed := time.Now()
	if _, err := nc.Request("$JS.API.CONSUMER.PAUSE.ORDERS."+p.Lanes[0].Name, []byte(`{}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "3 messages", 10*time.Second, func() bool { return len(rec.snapshot()) == 3 })
	if took := time.Since(resumed); took > time.Second {
		t.Errorf("took %s after the resume", took)
	}
}

// TestStopHandsOver: a stop lets the message in flight finish (it is not
// cancelled), acks it, and leaves; the other instance takes the lane at
// once, and its first message there starts after the first one's end.
func TestStopHandsOver(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 3)...)
	rec := &recorder{}
	var aCancelled atomic.Bool
	a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			time.Sleep(time.Second)
			aCancelled.Store(ctx.Err() != nil)
			return nil
		}))
	testutil.WaitFor(t, "a busy", 10*time.Second, func() bool { return a.w.Stats().InFlight == 1 })
	b := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "b"}, rec.handler("b", nil))
	testutil.WaitFor(t, "b joined", 10*time.Second, func() bool { return b.w.Stats().Members == 2 })
	if err := a.wait(t); err != nil {
		t.Fatalf("a stopped with %v", err)
	}
	if aCancelled.Load() {
		t.Error("the message in flight was cancelled: a stop must let it finish")
	}
	testutil.WaitFor(t, "3 messages", 10*time.Second, func() bool { return len(rec.seqs()) == 3 })
	checkOrder(t, rec.snapshot(), false)
	for seq, n := range rec.seqs() {
		if n != 1 {
			t.Errorf("seq %d ran %d times", seq, n)
		}
	}
}

// TestGraceAndAbort: a message still running when the grace period ends
// is cancelled and handed back (redelivered at once, to the next
// instance); Run says so. Abort does the same without waiting.
func TestGraceAndAbort(t *testing.T) {
	t.Parallel()
	for _, abort := range []bool{false, true} {
		t.Run(strconv.FormatBool(abort), func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 1)
			natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 1)...)
			rec := &recorder{}
			a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", Grace: 300 * time.Millisecond},
				rec.handler("a", func(ctx context.Context, m *Msg) error { <-ctx.Done(); return ctx.Err() }))
			testutil.WaitFor(t, "a busy", 10*time.Second, func() bool { return a.w.Stats().InFlight == 1 })
			stopped := time.Now()
			want := ErrGraceExpired
			if abort {
				a.w.Abort()
				want = ErrAborted
			}
			if err := a.wait(t); !errors.Is(err, want) {
				t.Fatalf("Run returned %v, want %v", err, want)
			}
			took := time.Since(stopped)
			if abort && took > 200*time.Millisecond || !abort && (took < 300*time.Millisecond || took > 2*time.Second) {
				t.Errorf("stopped after %s", took)
			}
			b := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "b"}, rec.handler("b", nil))
			testutil.WaitFor(t, "b ran it", 10*time.Second, func() bool { return b.w.Stats().Processed == 1 })
			if since := time.Since(stopped); since > 5*time.Second {
				t.Errorf("redelivered %s after the stop: it was not handed back", since)
			}
		})
	}
}

// TestLostContact: when the server stops answering the in-progress acks
// for most of the ack wait, the handler is stopped before the message can
// be redelivered beside it.
func TestLostContact(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the server stops mid-message)")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, ackWait(2*time.Second))
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 1)...)
	ended := make(chan error, 1)
	rec := &recorder{}
	a := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			select {
			case <-ctx.Done():
				ended <- context.Cause(ctx)
			case <-time.After(20 * time.Second):
				ended <- nil
			}
			return ctx.Err()
		}))
	testutil.WaitFor(t, "a busy", 10*time.Second, func() bool { return a.w.Stats().InFlight == 1 })
	lost := time.Now()
	s.Stop()
	err := <-ended
	if !errors.Is(err, errLostContact) {
		t.Fatalf("handler ended with %v, want the lost-contact cause", err)
	}
	if took := time.Since(lost); took > 2*time.Second {
		t.Errorf("stopped %s after contact was lost: the ack wait (2s) may have passed", took)
	}
}
