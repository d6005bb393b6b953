package work

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestSpreadJoinLeave: two instances split 8 lanes 4/4; a third joins
// and takes its share (3/3/2) at once; one leaves on a stop and the two
// left take its lanes at once, not a lease later. Messages published all
// along are processed once each, in key order, with no lane run by two
// instances at a time.
func TestSpreadJoinLeave(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 8)
	rec := &recorder{}
	slow := func(ctx context.Context, m *Msg) error { time.Sleep(2 * time.Millisecond); return nil }
	cfg := func(name string) Config {
		return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name}
	}
	a := startWorker(t, s.URL(), cfg("a"), rec.handler("a", slow))
	b := startWorker(t, s.URL(), cfg("b"), rec.handler("b", slow))
	testutil.WaitFor(t, "4/4", 10*time.Second, func() bool { return settled(p, 4, 4, a, b) })

	stopPublishing := make(chan struct{})
	published := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stopPublishing:
				published <- n
				return
			default:
			}
			publishKeys(t, js, p, 16, 1)
			n += 16
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	joined := time.Now()
	c := startWorker(t, s.URL(), cfg("c"), rec.handler("c", slow))
	testutil.WaitFor(t, "3/3/2", 10*time.Second, func() bool { return settled(p, 2, 3, a, b, c) })
	t.Logf("join settled in %s", time.Since(joined))
	time.Sleep(300 * time.Millisecond)
	left := time.Now()
	if err := b.wait(t); err != nil {
		t.Fatalf("b stopped with %v", err)
	}
	testutil.WaitFor(t, "4/4 after b left", 10*time.Second, func() bool { return settled(p, 4, 4, a, c) })
	if took := time.Since(left); took > 2*time.Second {
		t.Errorf("a leave took %s to rebalance: it should not wait for the lease", took)
	}
	time.Sleep(300 * time.Millisecond)
	close(stopPublishing)
	n := <-published
	testutil.WaitFor(t, "every message processed", 30*time.Second, func() bool { return len(rec.seqs()) == n })
	for seq, k := range rec.seqs() {
		if k != 1 {
			t.Errorf("seq %d processed %d times", seq, k)
		}
	}
	checkOrder(t, rec.snapshot(), false)
}

// TestFailover: an instance that dies (connection gone, no leave) loses
// its lanes to the survivor once its lease expires, and the messages it
// had in flight are redelivered after the ack wait. Pinned lanes move at
// once too: the survivor unpins them instead of waiting for the pinned TTL.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (an instance dies, its lease and ack wait let pass)")
	}
	t.Parallel()
	for _, pinned := range []bool{false, true} {
		t.Run(map[bool]string{false: "unpinned", true: "pinned"}[pinned], func(t *testing.T) {
			t.Parallel()
			s, _, js, p := setup(t, "orders", 4, func(d *planner.Design) {
				d.Lane.AckWait = planner.Duration(2 * time.Second)
				d.Lane.Pinned = pinned
			})
			rec := &recorder{}
			hold := make(chan struct{})
			bWork := func(ctx context.Context, m *Msg) error {
				select { // b never finishes: it dies with its messages in flight
				case <-hold:
				case <-ctx.Done():
				}
				return ctx.Err()
			}
			cfg := func(name string) Config {
				return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second}
			}
			a := startWorker(t, s.URL(), cfg("a"), rec.handler("a", nil))
			b := startWorker(t, s.URL(), cfg("b"), rec.handler("b", bWork))
			testutil.WaitFor(t, "2/2", 10*time.Second, func() bool { return settled(p, 2, 2, a, b) })
			publishKeys(t, js, p, 16, 4)
			testutil.WaitFor(t, "b holds messages", 10*time.Second, func() bool { return b.w.Stats().InFlight == 2 })
			killed := time.Now()
			b.kill(t)
			close(hold)
			testutil.WaitFor(t, "a serves every lane", 10*time.Second, func() bool { return settled(p, 4, 4, a) })
			moved := time.Since(killed)
			testutil.WaitFor(t, "every message processed by a", 20*time.Second, func() bool {
				n := 0
				for _, c := range rec.snapshot() {
					if c.instance == "a" {
						n++
					}
				}
				return n >= 64
			})
			t.Logf("lanes moved %s after the kill; all processed %s after", moved, time.Since(killed))
			if moved > 2*time.Second+2*time.Second {
				t.Errorf("lanes moved %s after the kill, want within the 2s lease (+ the server's expiry tick)", moved)
			}
			checkOrder(t, rec.snapshot(), true)
		})
	}
}

// TestChurnLosesNoDelivery: instances join and leave every 150ms while
// messages flow. Each move hands lanes over; a message the server sends
// to the old owner in that instant must be handed back, not dropped (a
// dropped delivery would wait out the 30s ack wait). Everything is done
// within seconds of the last publish.
func TestChurnLosesNoDelivery(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 8)
	rec := &recorder{}
	cfg := func(name string) Config {
		return Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name}
	}
	startWorker(t, s.URL(), cfg("a"), rec.handler("a", nil))
	done := make(chan int)
	go func() {
		n := 0
		for i := 0; i < 40; i++ {
			publishKeys(t, js, p, 16, 1)
			n += 16
			time.Sleep(15 * time.Millisecond)
		}
		done <- n
	}()
	for i := 0; i < 4; i++ {
		b := startWorker(t, s.URL(), cfg(fmt.Sprintf("b%d", i)), rec.handler(fmt.Sprintf("b%d", i), nil))
		time.Sleep(150 * time.Millisecond)
		b.wait(t)
		time.Sleep(50 * time.Millisecond)
	}
	n := <-done
	published := time.Now()
	testutil.WaitFor(t, "every message", 20*time.Second, func() bool { return len(rec.seqs()) == n })
	if took := time.Since(published); took > 5*time.Second {
		t.Errorf("the last messages took %s: a delivery was lost in a hand-over and waited for the ack wait", took)
	}
	checkOrder(t, rec.snapshot(), true)
}

// TestJoinLogCountsTruly: the membership lines count the members this
// instance knows, itself included: an instance that joins after another
// (or with it) does not log "instance joined ... members=1" for the other
// and then "rebalanced members=2"; it logs the members it found once its
// own join is in, and later joins count it.
func TestJoinLogCountsTruly(t *testing.T) {
	t.Parallel()
	s, _, _, p := setup(t, "orders", 2)
	logs := map[string]*testutil.Buffer{}
	start := func(name string) *started {
		logs[name] = &testutil.Buffer{}
		return startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name,
			Logger: slog.New(slog.NewTextHandler(logs[name], nil))}, HandlerFunc(func(context.Context, *Msg) error { return nil }))
	}
	a := start("a")
	testutil.WaitFor(t, "a serving", 10*time.Second, func() bool { return a.w.Stats().Serving == 2 })
	b := start("b")
	c := start("c") // b and c start together
	testutil.WaitFor(t, "three members everywhere", 10*time.Second, func() bool {
		return a.w.Stats().Members == 3 && b.w.Stats().Members == 3 && c.w.Stats().Members == 3
	})
	for name, l := range logs {
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, `msg="instance joined"`) && strings.Contains(line, "members=1") {
				t.Errorf("%s: a join counted without the instance itself: %s", name, line)
			}
		}
	}
	if !strings.Contains(logs["b"].String(), `msg="in the membership" members=2 instances="[a b]"`) &&
		!strings.Contains(logs["b"].String(), `msg="in the membership" members=3 instances="[a b c]"`) {
		t.Errorf("b does not say whom it found:\n%s", logs["b"])
	}
	if !strings.Contains(logs["a"].String(), `msg="instance joined" instance=b members=2`) && !strings.Contains(logs["a"].String(), `msg="instance joined" instance=b members=3`) {
		t.Errorf("a does not count b's join with itself:\n%s", logs["a"])
	}
}

// TestNoLanesOfTheDesign: an instance of a design that has no lanes on the
// stream warns at start, naming the designs that have lanes there, warns
// again while it stays so, and keeps running: lanes applied later are
// served.
func TestNoLanesOfTheDesign(t *testing.T) {
	s, nc, js, p := setup(t, "orders", 2)
	defer func(d time.Duration) { noLanesRepeat = d }(noLanesRepeat)
	noLanesRepeat = 300 * time.Millisecond
	var logs testutil.Buffer
	rec := &recorder{}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: "billing", Instance: "a", Relist: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, rec.handler("a", nil))
	testutil.WaitFor(t, "two warnings", 10*time.Second, func() bool { return strings.Count(logs.String(), "no lanes of design billing") >= 2 })
	if !strings.Contains(logs.String(), "designs with lanes there: orders (2 lanes)") {
		t.Errorf("the warning does not name the designs on the stream:\n%s", logs.String())
	}
	pb := testutil.Plan(t, "billing", 1, func(d *planner.Design) { d.Stream.Name = p.Stream.Name; d.Subject = p.Design.Subject })
	natstest.CreateLanes(t, js, pb)
	natstest.Publish(t, js, natstest.SubjectsFor(t, pb, 0, 1)...)
	testutil.WaitFor(t, "the new lane's message processed", 10*time.Second, func() bool { return w.w.Stats().Processed == 1 })
	warnings := strings.Count(logs.String(), "no lanes of design billing")
	// The warning comes from a listing that finds no lanes, at once since
	// the lanes were found (its repeat starts again). Two listings begun
	// after this point (one at a time: the second begins after the first
	// was judged) prove that it stopped, where a pause would only hope so.
	listings := listingsOf(t, nc, p.Stream.Name)
	since := listings.Load()
	testutil.WaitFor(t, "two more listings of the lanes", 10*time.Second, func() bool { return listings.Load() >= since+2 })
	if n := strings.Count(logs.String(), "no lanes of design billing"); n != warnings {
		t.Errorf("still warned after the lanes appeared")
	}
}
