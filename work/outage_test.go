package work

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
)

// TestOutageIsNotPoison: a handler that could not run (an Outage error: a
// missing program, a refused connection) is no failure of the message.
// Under park with park-after 1 nothing is parked: the message is kept
// (in-progress acks, no redelivery: the handler sees attempt 1 every
// time) and the handler tried again after growing delays, while the lane's
// next message waits. The worker shows the outage (Outages, Stats) and
// logs its start and its end once each, not per try.
func TestOutageIsNotPoison(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: an outage retried after growing delays, 4s")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, ackWait(time.Second))
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 2)...)
	var down atomic.Bool
	down.Store(true)
	var logs testutil.Buffer
	rec := &recorder{}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", OnPoison: Park, DeadLetter: "dlq.orders", ParkAfter: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		rec.handler("a", func(ctx context.Context, m *Msg) error {
			if down.Load() {
				return Outage(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
			}
			return nil
		}))
	testutil.WaitFor(t, "3 tries", 20*time.Second, func() bool { return rec.seqs()[1] >= 3 })
	outages := w.w.Outages()
	if len(outages) != 1 || outages[0].Lane != p.Lanes[0].Name || outages[0].Tries < 3 || !strings.Contains(outages[0].Reason, "connection refused") ||
		time.Since(outages[0].Since) < 500*time.Millisecond {
		t.Errorf("Outages() = %+v, want the lane, since the first try, 3+ tries, the reason", outages)
	}
	if st := w.w.Stats(); st.Outages != 1 || st.OutageSince.IsZero() || !strings.Contains(st.OutageReason, "connection refused") || st.Failed != 0 {
		t.Errorf("Stats() = %+v, want 1 lane in outage, no failure", st)
	}
	calls := rec.snapshot()
	for i, c := range calls {
		if c.attempt != 1 {
			t.Errorf("try %d saw attempt %d: the message was redelivered", i+1, c.attempt)
		}
		if i >= 2 && c.start.Sub(calls[i-1].start) <= calls[i-1].start.Sub(calls[i-2].start) {
			t.Errorf("the delay before try %d did not grow: %v then %v", i+1, calls[i-1].start.Sub(calls[i-2].start), c.start.Sub(calls[i-1].start))
		}
	}
	if rec.seqs()[2] != 0 {
		t.Error("the lane's next message ran during the outage")
	}
	down.Store(false)
	testutil.WaitFor(t, "seq 2 processed", 30*time.Second, func() bool { return rec.seqs()[2] == 1 })
	// A handler's end comes before its ack is confirmed, and counted.
	testutil.WaitFor(t, "seq 2 acked", 10*time.Second, func() bool { return w.w.Stats().Processed == 2 })
	if n, _, _, err := membership.CountParked(ctx, jsapi.New(connect.Around(js, 5*time.Second)), "dlq.orders"); err != nil || n != 0 {
		t.Errorf("%d parked (%v), want none", n, err)
	}
	if o := w.w.Outages(); len(o) != 0 {
		t.Errorf("Outages() = %+v after the handler ran again", o)
	}
	if st := w.w.Stats(); st.Outages != 0 || st.Processed != 2 || st.Failed != 0 || st.Parked != 0 {
		t.Errorf("Stats() = %+v", st)
	}
	text := logs.String()
	if n := strings.Count(text, "handler outage:"); n != 1 {
		t.Errorf("the outage's start is logged %d times, want once:\n%s", n, text)
	}
	if n := strings.Count(text, "handler outage over"); n != 1 {
		t.Errorf("the outage's end is logged %d times, want once:\n%s", n, text)
	}
}

// TestPullRefusedInWords: a pull answered 503 (no responders: JetStream
// disabled, the lane's stream or its leader gone) is logged in words, not
// as a bare status with an empty description.
func TestPullRefusedInWords(t *testing.T) {
	t.Parallel()
	s, _, _, p := setup(t, "orders", 1)
	var logs testutil.Buffer
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a", PullExpiry: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, HandlerFunc(func(context.Context, *Msg) error { return nil }))
	testutil.WaitFor(t, "serving", 10*time.Second, func() bool { return w.w.Stats().Serving == 1 })
	if err := s.Server.Server.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a refused pull logged", 20*time.Second, func() bool { return strings.Contains(logs.String(), "pull refused") })
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "pull refused") {
			line = l
			break
		}
	}
	if !strings.Contains(line, "503") || !strings.Contains(line, "no responders") || strings.Contains(line, `description=""`) {
		t.Errorf("the refusal is not said in words: %s", line)
	}
}
