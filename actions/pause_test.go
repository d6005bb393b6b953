package actions_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// TestPauseHoldsAndResumeDrainsInOrder: with lanes work running, a
// pause holds every lane while messages keep being published (none of
// them begins before the resume), inspect names who paused and why, and
// the resume runs them, every key in order. Serial lanes on a single
// server, and key-parallel lanes replicated on a 3-node cluster.
func TestPauseHoldsAndResumeDrainsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers, a pause and a resume, 10s and more")
	}
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cluster  bool
		keys     int
		replicas int
	}{{"single node, serial lanes", false, 1, 1}, {"3-node cluster, key-parallel lanes R3", true, 4, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := ""
			if tc.cluster {
				cl := natstest.StartCluster(t, 3)
				url = cl.Servers[0].URL() + "," + cl.Servers[1].URL()
			} else {
				url = natstest.Start(t).URL()
			}
			_, js := natstest.Connect(t, url)
			p := testutil.Plan(t, "orders", 4, func(d *planner.Design) {
				d.Lane.KeysInFlight = tc.keys
				d.Stream.Replicas = tc.replicas
			})
			natstest.CreateLanes(t, js, p)
			run := ordercheck.New(t, p, ordercheck.KeysOnEveryLane(t, p), 10, func(string) time.Duration { return time.Millisecond })
			startWorker(t, js, p, run)
			conn := dial(t, url)
			target := actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}

			ctx := context.Background()
			half := len(run.W.Messages) / 2
			run.PublishRange(ctx, t, js, 0, half, 0)
			testutil.WaitFor(t, "the first half finished", time.Minute, func() bool { return run.DoneUpTo(half) })

			out := act(t, func() (*actions.Outcome, error) {
				sel, err := actions.Select(ctx, conn, target)
				if err != nil {
					return nil, err
				}
				return actions.Pause(ctx, conn, sel, actions.PauseOptions{By: "oncall", Reason: "bad deploy"})
			})
			if out.Changed != 4 {
				t.Fatalf("paused %d lanes, want 4: %+v", out.Changed, out.Lanes)
			}
			run.PublishRange(ctx, t, js, half, len(run.W.Messages), 0)
			// The worker asks, the server holds: every lane has its
			// messages waiting and a pull request waiting beside them.
			testutil.WaitFor(t, "every lane paused with messages and a pull waiting", time.Minute, func() bool {
				r := inspect(t, conn, target)
				for _, l := range r.Lanes {
					if !l.Paused || l.Pending == 0 || l.Waiting == 0 {
						return false
					}
				}
				return true
			})
			r := inspect(t, conn, target)
			for _, l := range r.Lanes {
				if l.PausedBy == nil || l.PausedBy.By != "oncall" || l.PausedBy.Reason != "bad deploy" || !l.PausedBy.Until.IsZero() {
					t.Errorf("lane %s: paused by %+v, want oncall, bad deploy, until resumed", l.Name, l.PausedBy)
				}
			}
			if f := findings(r, "paused"); len(f) != 4 || !strings.Contains(f[0].Message, "by oncall") || !strings.Contains(f[0].Message, "until resumed") || !strings.Contains(f[0].Advice, "lanes resume") {
				t.Errorf("paused findings: %+v", f)
			}

			resumed := time.Now()
			out = act(t, func() (*actions.Outcome, error) {
				sel, err := actions.Select(ctx, conn, target)
				if err != nil {
					return nil, err
				}
				return actions.Resume(ctx, conn, sel, false)
			})
			if out.Changed != 4 {
				t.Fatalf("resumed %d lanes, want 4", out.Changed)
			}
			testutil.WaitFor(t, "every message finished", time.Minute, run.Done)
			run.Check(t)
			for msg, after := range run.Stalls(half, len(run.W.Messages), resumed) {
				if after < 0 {
					t.Errorf("message %d began %s before the resume", msg+1, -after)
				}
			}
			for _, l := range inspect(t, conn, target).Lanes {
				if l.Paused || l.PausedBy != nil {
					t.Errorf("lane %s still paused after the resume (by %+v)", l.Name, l.PausedBy)
				}
			}
		})
	}
}

// TestPauseUntilEndsByItself: a pause with an end lifts itself then, and
// lanes work pulls again without a resume.
func TestPauseUntilEndsByItself(t *testing.T) {
	t.Parallel()
	url := natstest.Start(t).URL()
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "orders", 2)
	natstest.CreateLanes(t, js, p)
	run := ordercheck.New(t, p, ordercheck.KeysOnEveryLane(t, p), 5, func(string) time.Duration { return 0 })
	startWorker(t, js, p, run)
	conn := dial(t, url)
	target := actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}
	until := time.Now().Add(3 * time.Second)
	act(t, func() (*actions.Outcome, error) {
		sel, err := actions.Select(context.Background(), conn, target)
		if err != nil {
			return nil, err
		}
		return actions.Pause(context.Background(), conn, sel, actions.PauseOptions{Until: until, By: "ci"})
	})
	run.Publish(context.Background(), t, js, 0)
	testutil.WaitFor(t, "every message finished after the pause ended", time.Minute, run.Done)
	for msg, after := range run.Stalls(0, len(run.W.Messages), until) {
		if after < -100*time.Millisecond { // the server's clock is this one
			t.Errorf("message %d began %s before the pause ended", msg+1, -after)
		}
	}
	run.Check(t)
}

// TestPauseRefusesHeldLanesAndBadInput: a lane apply holds for a
// repartition is refused (pause and resume), as are unknown lanes,
// designs and keys, and an end in the past; nothing changes.
func TestPauseRefusesHeldLanesAndBadInput(t *testing.T) {
	t.Parallel()
	url := natstest.Start(t).URL()
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, js, p)
	conn := dial(t, url)
	ctx := context.Background()
	target := actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}

	for _, tc := range []struct {
		name string
		t    actions.Target
		want string
	}{
		{"unknown lane", actions.Target{Stream: target.Stream, Design: target.Design, Lanes: []string{"nope"}}, `no lane "nope"`},
		{"partition out of range", actions.Target{Stream: target.Stream, Design: target.Design, Lanes: []string{"9"}}, `no lane "9"`},
		{"unknown design", actions.Target{Stream: target.Stream, Design: "other"}, `design "other" has no lanes`},
	} {
		_, err := actions.Select(ctx, conn, tc.t)
		if e, ok := err.(*actions.InputError); !ok || !strings.Contains(e.Error(), tc.want) {
			t.Errorf("%s: %v, want an input error with %q", tc.name, err, tc.want)
		}
	}
	sel, err := actions.Select(ctx, conn, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actions.Pause(ctx, conn, sel, actions.PauseOptions{Until: time.Now().Add(-time.Minute)}); err == nil || !strings.Contains(err.Error(), "not in the future") {
		t.Errorf("an end in the past: %v", err)
	}
	// A lane held by apply (its metadata says so, and it is paused).
	var held jetstream.ConsumerConfig
	natstest.Convert(t, p.Consumers[1], &held)
	lane := held.Durable
	held.Metadata[planner.MetaHeld] = "repartition"
	if _, err := js.UpdateConsumer(ctx, p.Stream.Name, held); err != nil {
		t.Fatal(err)
	}
	if _, err := js.PauseConsumer(ctx, p.Stream.Name, lane, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	sel, err = actions.Select(ctx, conn, target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actions.Pause(ctx, conn, sel, actions.PauseOptions{}); err == nil || !strings.Contains(err.Error(), lane) {
		t.Errorf("pause of a held lane: %v, want a refusal naming %s", err, lane)
	} else if _, ok := err.(*actions.RefusedError); !ok {
		t.Errorf("pause of a held lane: %T, want *actions.RefusedError", err)
	}
	if _, err := actions.Resume(ctx, conn, sel, false); err == nil || !strings.Contains(err.Error(), "re-run lanes apply") {
		t.Errorf("resume of a held lane: %v", err)
	}
	for _, l := range inspect(t, conn, target).Lanes {
		if l.Paused != (l.Name == lane) {
			t.Errorf("lane %s paused %v after refusals", l.Name, l.Paused)
		}
	}
}

func startWorker(t *testing.T, js jetstream.JetStream, p *planner.Plan, run *ordercheck.Run) {
	t.Helper()
	worktest.Start(t, js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
			if !run.Execute(ctx, "a", m.Partition, m.Seq) {
				return ctx.Err()
			}
			return nil
		}))
}

func dial(t *testing.T, url string) *connect.Conn { return worktest.Dial(t, url) }

func act(t *testing.T, f func() (*actions.Outcome, error)) *actions.Outcome {
	t.Helper()
	out, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func inspect(t *testing.T, c *connect.Conn, target actions.Target) *health.Report {
	t.Helper()
	r, err := health.Inspect(context.Background(), c, health.Options{Stream: target.Stream, Design: target.Design, MaxSubjects: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func findings(r *health.Report, code string) []health.Finding {
	var out []health.Finding
	for _, f := range r.Findings {
		if f.Code == code {
			out = append(out, f)
		}
	}
	return out
}

// TestPauseLetsTheMessageInFlightFinish: a lane paused while its handler
// runs finishes that message (it is acked while the lane is paused), and
// the next one waits for the resume.
func TestPauseLetsTheMessageInFlightFinish(t *testing.T) {
	t.Parallel()
	url := natstest.Start(t).URL()
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "orders", 1)
	natstest.CreateLanes(t, js, p)
	release := make(chan struct{})
	started := make(chan uint64, 8)
	worktest.Start(t, js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
		work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
			started <- m.Seq
			if m.Seq == 1 {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}))
	ctx := context.Background()
	subject, err := p.SubjectForKey("alice")
	if err != nil {
		t.Fatal(err)
	}
	natstest.Publish(t, js, subject, subject)
	if seq := <-started; seq != 1 {
		t.Fatalf("first message run: seq %d", seq)
	}
	conn := dial(t, url)
	target := actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}
	act(t, func() (*actions.Outcome, error) {
		sel, err := actions.Select(ctx, conn, target)
		if err != nil {
			return nil, err
		}
		return actions.Pause(ctx, conn, sel, actions.PauseOptions{By: "test"})
	})
	close(release)
	testutil.WaitFor(t, "the message in flight acked while paused", 30*time.Second, func() bool {
		l := inspect(t, conn, target).Lanes[0]
		return l.Paused && l.AckFloorSeq == 1 && l.AckPending == 0 && l.Waiting > 0
	})
	select {
	case seq := <-started:
		t.Fatalf("seq %d began while the lane was paused", seq)
	default:
	}
	act(t, func() (*actions.Outcome, error) {
		sel, err := actions.Select(ctx, conn, target)
		if err != nil {
			return nil, err
		}
		return actions.Resume(ctx, conn, sel, false)
	})
	select {
	case seq := <-started:
		if seq != 2 {
			t.Fatalf("after the resume: seq %d, want 2", seq)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the next message did not run after the resume")
	}
}
