package commands_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// skipLane makes a design with two serial lanes and publishes n messages
// on lane 0; it returns the plan, the lane and their sequences.
func skipLane(t *testing.T, js jetstream.JetStream, n int) (*planner.Plan, string, []uint64) {
	t.Helper()
	p := testutil.Plan(t, "orders", 2)
	natstest.CreateLanes(t, js, p)
	var seqs []uint64
	for i := 0; len(seqs) < n; i++ {
		subj, _ := p.SubjectForKey("u" + strconv.Itoa(i))
		if l, _ := p.LaneOf(subj); l.Partition != 0 {
			continue
		}
		ack, err := js.Publish(context.Background(), subj, []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return p, p.Consumers[0].Durable, seqs
}

func laneFloor(t *testing.T, js jetstream.JetStream, stream, lane string) uint64 {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, lane)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ci.AckFloor.Stream
}

// TestSkipCommand: lanes skip as a user types it: the dry run exits 3
// and changes nothing, -o json reports the skip, a re-run says it is
// done (exit 0), a passed message is refused (4), bad input exits 2.
func TestSkipCommand(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p, lane, seqs := skipLane(t, js, 3)
	base := []string{"skip", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name, "--lanes", lane}
	seq := strconv.FormatUint(seqs[0], 10)

	code, out, errs := lanes(t, append(base, "--seq", seq, "--dry-run")...)
	if code != 3 || !strings.Contains(out, "would terminate") || !strings.Contains(out, "no lanes work instance") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	if f := laneFloor(t, js, p.Stream.Name, lane); f != 0 {
		t.Fatalf("the dry run moved the lane to %d", f)
	}
	code, out, errs = lanes(t, append(base, "--seq", seq, "--reason", "bad", "-o", "json")...)
	var got struct {
		Result, Subject string
		Seq             uint64
		Changed         bool
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Result != "terminated" || got.Seq != seqs[0] || !got.Changed || got.Subject == "" {
		t.Fatalf("skip: exit %d %+v\n%s%s", code, got, out, errs)
	}
	if f := laneFloor(t, js, p.Stream.Name, lane); f != seqs[0] {
		t.Fatalf("ack floor %d after the skip, want %d", f, seqs[0])
	}
	if code, out, errs = lanes(t, append(base, "--seq", seq)...); code != 0 || !strings.Contains(out, "already terminated") {
		t.Errorf("re-run: exit %d\n%s%s", code, out, errs)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{append(base, "--seq", strconv.FormatUint(seqs[2], 10)), 4, "not the head"},
		{append(base, "--seq", "100000"), 2, "beyond stream"},
		{base, 2, "--seq"},
		{append(base, "--seq", strconv.FormatUint(seqs[1], 10), "--park", "--term"), 2, "give one"},
		{[]string{"skip", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name, "--seq", "2"}, 2, "one lane"},
		{[]string{"skip", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", "nope", "--lanes", lane, "--seq", "2"}, 2, `design "nope"`},
		{slices.Concat(base[:7], []string{"--lanes", "nope", "--seq", "2"}), 2, `no lane "nope"`},
		{append(base, "--seq", strconv.FormatUint(seqs[1], 10), "--park"), 4, "--dead-letter"},
	} {
		code, out, errs := lanes(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s%s", tc.args[7:], code, tc.code, tc.want, out, errs)
		}
	}
	if f := laneFloor(t, js, p.Stream.Name, lane); f != seqs[0] {
		t.Errorf("refusals moved the lane to %d", f)
	}
	if code, out, _ := lanes(t, "skip", "--help"); code != 0 || !strings.Contains(out, "Examples:") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

// TestKilledSkipFinishes: lanes skip killed with SIGKILL in the middle,
// then run again: with no instance serving the lane, killed as it resets
// the lane; with an instance running the message, killed while it waits
// for the outcome. The re-run finishes the skip or says it was done, and
// the lane has moved exactly one message.
func TestKilledSkipFinishes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kill tests")
	}
	cleanEnv(t)
	t.Run("no worker, killed at the reset", func(t *testing.T) {
		srv := natstest.Start(t)
		_, js := natstest.Connect(t, srv.URL())
		p, lane, seqs := skipLane(t, js, 3)
		args := []string{"skip", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name, "--lanes", lane, "--seq", strconv.FormatUint(seqs[0], 10)}
		if c := runChild(t, srv.URL(), "CONSUMER.RESET", 1, args...); !c.killed {
			t.Fatalf("finished before the kill: exit %d %s", c.code, c.stderr)
		}
		code, out, errs := lanes(t, args...)
		if code != 0 || !strings.Contains(out, "terminated") {
			t.Fatalf("re-run: exit %d\n%s%s", code, out, errs)
		}
		if f := laneFloor(t, js, p.Stream.Name, lane); f != seqs[0] {
			t.Errorf("ack floor %d, want %d: exactly one message skipped", f, seqs[0])
		}
	})
	t.Run("worker running it, killed while waiting", func(t *testing.T) {
		srv := natstest.Start(t)
		_, js := natstest.Connect(t, srv.URL())
		p, lane, seqs := skipLane(t, js, 3)
		poison := seqs[0]
		var began, others atomic.Int32
		w, err := work.New(js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"},
			work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
				if m.Seq == poison {
					began.Add(1)
					<-ctx.Done()
					return ctx.Err()
				}
				others.Add(1)
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		defer func() { cancel(); <-done }()
		testutil.WaitFor(t, "the poison began", time.Minute, func() bool { return began.Load() > 0 })
		args := []string{"skip", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name, "--lanes", lane, "--seq", strconv.FormatUint(poison, 10)}
		// The second watch of the membership bucket is the wait for the
		// outcome (the first is inspect's read): the request is written
		// by then, and the instance settles it without the command.
		if c := runChild(t, srv.URL(), "CONSUMER.CREATE.KV_lanes_work", 2, args...); !c.killed {
			t.Fatalf("finished before the kill: exit %d %s", c.code, c.stdout)
		}
		testutil.WaitFor(t, "the other messages ran", time.Minute, func() bool { return others.Load() == 2 })
		code, out, errs := lanes(t, args...)
		if code != 0 || !strings.Contains(out, "already terminated") {
			t.Fatalf("re-run: exit %d\n%s%s", code, out, errs)
		}
		if n := began.Load(); n != 1 {
			t.Errorf("the skipped message began %d times, want 1", n)
		}
	})
}
