package actions_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// The rewind tests judge with a recorder rather than the order judge:
// the judge counts a message run again after its key's later ones as an
// order violation, which is what a rewind asks for. The recorder keeps
// each key's runs in the order they began; a rewind's runs must be each
// key's messages from the point on, every one, in stream order, one run
// at a time.

// rewindRec records every run a worker begins: per key, the stream
// sequences in the order they began.
type rewindRec struct {
	mu      sync.Mutex
	byKey   map[string][]uint64
	running map[string]bool
	overlap []string // a key's run that began while another of its runs was running
	keyOf   map[uint64]string
	laneOf  map[uint64]string
	work    time.Duration // how long a run takes (1ms by default)
}

func newRewindRec() *rewindRec {
	return &rewindRec{byKey: map[string][]uint64{}, running: map[string]bool{}, keyOf: map[uint64]string{}, laneOf: map[uint64]string{}}
}

func (r *rewindRec) handle(ctx context.Context, m *work.Msg) error {
	r.mu.Lock()
	if r.running[m.Key] {
		r.overlap = append(r.overlap, fmt.Sprintf("%s seq %d", m.Key, m.Seq))
	}
	r.running[m.Key] = true
	r.byKey[m.Key] = append(r.byKey[m.Key], m.Seq)
	r.keyOf[m.Seq], r.laneOf[m.Seq] = m.Key, m.Lane
	d := max(r.work, time.Millisecond)
	r.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.running[m.Key] = false
	r.mu.Unlock()
	return ctx.Err()
}

// mark is how many runs each key has had so far.
func (r *rewindRec) mark() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.byKey {
		out[k] = len(v)
	}
	return out
}

// since is each key's runs after a mark.
func (r *rewindRec) since(mark map[string]int) map[string][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]uint64{}
	for k, v := range r.byKey {
		if len(v) > mark[k] {
			out[k] = slices.Clone(v[mark[k]:])
		}
	}
	return out
}

// from is each key's stored messages at or after seq, in order.
func (r *rewindRec) from(seq uint64) map[string][]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]uint64{}
	for s, k := range r.keyOf {
		if s >= seq {
			out[k] = append(out[k], s)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// count is how many messages of a lane are at or after seq.
func (r *rewindRec) count(lane string, seq uint64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := int64(0)
	for s, l := range r.laneOf {
		if l == lane && s >= seq {
			n++
		}
	}
	return n
}

// lane is the lane a message ran on.
func (r *rewindRec) lane(seq uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.laneOf[seq]
}

// waitAgain waits until the runs since mark are, for every key, its
// messages from seq on (times times over: one replay per rewind), and
// checks that each key's runs went in stream order and restarted only at
// the point.
func (r *rewindRec) waitAgain(t *testing.T, mark map[string]int, seq uint64, times int) {
	t.Helper()
	want := r.from(seq)
	testutil.WaitFor(t, fmt.Sprintf("every message from seq %d run again", seq), 2*time.Minute, func() bool {
		got := r.since(mark)
		for k, w := range want {
			if len(got[k]) < times*len(w) {
				return false
			}
		}
		return true
	})
	got := r.since(mark)
	for k, runs := range got {
		w := want[k]
		if len(w) == 0 {
			t.Errorf("key %s ran %v again: none of its messages is at or after seq %d", k, runs, seq)
			continue
		}
		// Each run is the key's next message, or its first from the
		// point (a rewind began again there).
		for i, s := range runs {
			j := slices.Index(w, s)
			switch {
			case j < 0:
				t.Errorf("key %s: seq %d ran again, before the point %d (runs %v)", k, s, seq, runs)
			case i == 0 && j != 0, i > 0 && j != 0 && w[j-1] != runs[i-1]:
				t.Errorf("key %s: seq %d ran out of order (runs since the rewind %v, its messages %v)", k, s, runs, w)
			}
		}
		if len(runs) != times*len(w) {
			t.Errorf("key %s ran %d messages again, want %d (%v, its messages %v)", k, len(runs), times*len(w), runs, w)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.overlap) > 0 {
		t.Errorf("a key ran two messages at once: %v", r.overlap)
	}
}

// rewindEnv is a design's lanes with a worker running and its messages
// all run once.
type rewindEnv struct {
	url    string
	js     jetstream.JetStream
	conn   *connect.Conn
	plan   *planner.Plan
	rec    *rewindRec
	target actions.Target
	total  int
}

// startRewindEnv makes 4 lanes (keysInFlight, replicas), starts a worker
// and publishes perKey messages on 8 keys (2 a lane), waiting until all ran.
func startRewindEnv(t *testing.T, url string, keysInFlight, replicas, perKey int, edit ...func(*planner.Design)) *rewindEnv {
	t.Helper()
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "orders", 4, append([]func(*planner.Design){func(d *planner.Design) {
		d.Lane.KeysInFlight = keysInFlight
		d.Stream.Replicas = replicas
	}}, edit...)...)
	natstest.CreateLanes(t, js, p)
	e := &rewindEnv{url: url, js: js, conn: rewindDial(t, url), plan: p, rec: newRewindRec(),
		target: actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}}
	startRewindWorker(t, js, p, e.rec, "a")
	keys := append(ordercheck.KeysOnEveryLane(t, p), "k-a", "k-b", "k-c", "k-d")
	e.publish(t, keys, perKey)
	return e
}

func (e *rewindEnv) publish(t *testing.T, keys []string, perKey int) {
	t.Helper()
	var subjects []string
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			s, err := e.plan.SubjectForKey(k)
			if err != nil {
				t.Fatal(err)
			}
			subjects = append(subjects, s)
		}
	}
	natstest.Publish(t, e.js, subjects...)
	e.total += len(subjects)
	e.waitIdle(t)
}

// waitIdle waits until the worker ran every message published and the
// server has every ack (a handler returns before its ack is applied).
func (e *rewindEnv) waitIdle(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "every message run", 2*time.Minute, func() bool {
		e.rec.mu.Lock()
		n := len(e.rec.keyOf)
		e.rec.mu.Unlock()
		return n == e.total
	})
	testutil.WaitFor(t, "every message acked", time.Minute, func() bool {
		for _, c := range e.plan.Consumers {
			ci, err := e.js.Consumer(context.Background(), e.plan.Stream.Name, c.Durable)
			if err != nil {
				t.Fatal(err)
			}
			if i := ci.CachedInfo(); i.NumAckPending > 0 || i.NumPending > 0 {
				return false
			}
		}
		return true
	})
}

// startRewindWorker starts a lanes work instance; stop stops it (at the
// test's end at the latest).
func startRewindWorker(t *testing.T, js jetstream.JetStream, p *planner.Plan, rec *rewindRec, instance string) (stop func()) {
	t.Helper()
	return worktest.Start(t, js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: instance}, work.HandlerFunc(rec.handle))
}

func rewindDial(t *testing.T, url string) *connect.Conn { return worktest.Dial(t, url) }

// rewind selects the target's lanes and rewinds them.
func (e *rewindEnv) rewind(target actions.Target, o actions.RewindOptions) (*actions.RewindOutcome, error) {
	ctx := context.Background()
	sel, err := actions.Select(ctx, e.conn, target)
	if err != nil {
		return nil, err
	}
	return actions.Rewind(ctx, e.conn, sel, o)
}

// positions are the lanes' ack floors, deliveries and pauses, to show
// that nothing changed.
func (e *rewindEnv) positions(t *testing.T) string {
	t.Helper()
	var out []string
	for _, c := range e.plan.Consumers {
		ci, err := e.js.Consumer(context.Background(), e.plan.Stream.Name, c.Durable)
		if err != nil {
			t.Fatal(err)
		}
		i := ci.CachedInfo()
		out = append(out, fmt.Sprintf("%s floor=%d delivered=%d/%d paused=%v", i.Name, i.AckFloor.Stream, i.Delivered.Stream, i.Delivered.Consumer, i.Paused))
	}
	return strings.Join(out, "\n")
}

// TestRewindRunsAgainInKeyOrder: with a worker running, a rewind to a
// sequence and then to a time runs again exactly the messages from that
// point on, on every lane, each key's in stream order; nothing else runs
// again and the lanes end unpaused. Serial lanes on one server,
// key-parallel lanes replicated on a 3-node cluster.
func TestRewindRunsAgainInKeyOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers and rewinds")
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
			var url string
			if tc.cluster {
				cl := natstest.StartCluster(t, 3)
				url = cl.Servers[0].URL() + "," + cl.Servers[1].URL()
			} else {
				url = natstest.Start(t).URL()
			}
			e := startRewindEnv(t, url, tc.keys, tc.replicas, 6) // 48 messages
			const point = 30

			mark := e.rec.mark()
			out, err := e.rewind(e.target, actions.RewindOptions{ToSeq: point})
			if err != nil {
				t.Fatal(err)
			}
			if out.Changed != 4 || out.Seq != point {
				t.Fatalf("rewound %d lanes to seq %d, want 4 to %d: %+v", out.Changed, out.Seq, point, out.Lanes)
			}
			e.rec.waitAgain(t, mark, point, 1)

			// To a time: the store time of seq 40 (the first message at
			// or after it is seq 40).
			m, err := e.js.Stream(context.Background(), e.plan.Stream.Name)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := m.GetMsg(context.Background(), 40)
			if err != nil {
				t.Fatal(err)
			}
			mark = e.rec.mark()
			out, err = e.rewind(e.target, actions.RewindOptions{ToTime: raw.Time})
			if err != nil {
				t.Fatal(err)
			}
			if out.Seq != 40 || out.Changed != 4 {
				t.Fatalf("rewind to %s went to seq %d on %d lanes, want seq 40 on 4", raw.Time, out.Seq, out.Changed)
			}
			e.rec.waitAgain(t, mark, 40, 1)
			if s := e.positions(t); strings.Contains(s, "paused=true") {
				t.Errorf("lanes left paused:\n%s", s)
			}
		})
	}
}

// TestRewindDryRunCountsAndChangesNothing: a dry run shows each lane's
// position now and after and how many of its messages run again (the
// recorder's count), and changes nothing; a rewind of the lanes of one
// key touches that key's lane only.
func TestRewindDryRunCountsAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := startRewindEnv(t, natstest.Start(t).URL(), 1, 1, 5) // 40 messages
	before := e.positions(t)
	mark := e.rec.mark()
	out, err := e.rewind(e.target, actions.RewindOptions{ToSeq: 21, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, l := range out.Lanes {
		want := e.rec.count(l.Lane, 21)
		if !l.Changed || l.To != 21 || l.Again != want || l.AckFloor != l.Delivered || l.AckFloor == 0 {
			t.Errorf("lane %s: %+v, want changed to 21 with %d again", l.Lane, l, want)
		}
		total += want
	}
	if out.Again != total || total != 20 || !out.DryRun {
		t.Errorf("dry run: %d again in all, want %d (20)", out.Again, total)
	}
	if after := e.positions(t); after != before {
		t.Errorf("a dry run changed the lanes:\n%s\nnow:\n%s", before, after)
	}
	if got := e.rec.since(mark); len(got) > 0 {
		t.Errorf("a dry run ran messages again: %v", got)
	}

	// The lanes of one key: its lane only.
	key := ordercheck.KeysOnEveryLane(t, e.plan)[2]
	out, err = e.rewind(actions.Target{Stream: e.target.Stream, Design: e.target.Design, Keys: []string{key}}, actions.RewindOptions{ToSeq: 21})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Lanes) != 1 || out.Lanes[0].Lane != e.plan.Consumers[2].Durable {
		t.Fatalf("rewind of key %s: lanes %+v, want %s only", key, out.Lanes, e.plan.Consumers[2].Durable)
	}
	lane := e.plan.Consumers[2].Durable
	want := e.rec.count(lane, 21)
	testutil.WaitFor(t, "the key's lane ran again", time.Minute, func() bool {
		n := int64(0)
		for _, runs := range e.rec.since(mark) {
			n += int64(len(runs))
		}
		return n >= want
	})
	for k, runs := range e.rec.since(mark) {
		if l := e.rec.lane(runs[0]); l != lane {
			t.Errorf("key %s of lane %s ran again", k, l)
		}
	}
	if got, want := e.rec.since(mark)[key], e.rec.from(21)[key]; !slices.Equal(got, want) {
		t.Errorf("key %s ran %v again, want %v", key, got, want)
	}
}

// TestRewindRefusesWhatIsGone: each refusal names what cannot be done
// and changes nothing on any lane: a point the stream's max_msgs removed
// (the lane, the sequences and how many), a time before the first message
// kept, a point before the lanes' generation began, a sequence beyond the
// stream, a time in the future, an unknown lane, a design there is not;
// and a workqueue stream.
func TestRewindRefusesWhatIsGone(t *testing.T) {
	t.Parallel()
	url := natstest.Start(t).URL()
	e := startRewindEnv(t, url, 1, 1, 5) // 40 messages
	// The stream keeps 30: seqs 11 to 40.
	ctx := context.Background()
	st, err := e.js.Stream(ctx, e.target.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs = 30
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	before := e.positions(t)
	refused := func(what string, target actions.Target, o actions.RewindOptions, input bool, says ...string) {
		t.Helper()
		_, err := e.rewind(target, o)
		var re *actions.RefusedError
		var ie *actions.InputError
		switch {
		case input && !errors.As(err, &ie), !input && !errors.As(err, &re):
			t.Errorf("%s: %v (%T), want refused (input %v)", what, err, err, input)
		}
		for _, s := range says {
			if err != nil && !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", what, err, s)
			}
		}
		if after := e.positions(t); after != before {
			t.Errorf("%s changed the lanes:\n%s\nnow:\n%s", what, before, after)
		}
	}
	refused("beyond retention", e.target, actions.RewindOptions{ToSeq: 5}, false, "seqs 5 to 10", "6 messages", "max_msgs 30", "orders-")
	refused("a time before the first message kept", e.target, actions.RewindOptions{ToTime: time.Now().Add(-time.Hour)}, false, "removed", "seq 11")
	refused("beyond the stream", e.target, actions.RewindOptions{ToSeq: 41}, true, "beyond", "last sequence 40")
	refused("in the future", e.target, actions.RewindOptions{ToTime: time.Now().Add(time.Hour)}, true, "in the future")
	refused("an unknown lane", actions.Target{Stream: e.target.Stream, Design: e.target.Design, Lanes: []string{"nope"}}, actions.RewindOptions{ToSeq: 20}, true, `no lane "nope"`)
	refused("a design there is not", actions.Target{Stream: e.target.Stream, Design: "other"}, actions.RewindOptions{ToSeq: 20}, true, `"other" has no lanes`)

	// A generation that began at seq 40: lanes that start there.
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "gen", 2)
	natstest.CreateLanes(t, js, p, func(c *jetstream.ConsumerConfig) {
		c.DeliverPolicy, c.OptStartSeq = jetstream.DeliverByStartSequencePolicy, 3
		c.Metadata[planner.MetaStartSeq] = "3"
	})
	natstest.Publish(t, js, "gen.received_from.a", "gen.received_from.b", "gen.received_from.c", "gen.received_from.d")
	sel, err := actions.Select(ctx, e.conn, actions.Target{Stream: p.Stream.Name, Design: p.Design.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = actions.Rewind(context.Background(), e.conn, sel, actions.RewindOptions{ToSeq: 2})
	var re *actions.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "began at stream sequence 3") || !strings.Contains(err.Error(), "never mixes generations") {
		t.Errorf("a point before the generation: %v", err)
	}

	// A workqueue stream.
	wq := testutil.Plan(t, "wq", 2, func(d *planner.Design) { d.Stream.Retention = "workqueue" })
	natstest.CreateLanes(t, js, wq)
	natstest.Publish(t, js, "wq.received_from.a")
	sel, err = actions.Select(context.Background(), e.conn, actions.Target{Stream: wq.Stream.Name, Design: wq.Design.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = actions.Rewind(context.Background(), e.conn, sel, actions.RewindOptions{ToSeq: 1})
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "workqueue") {
		t.Errorf("a workqueue stream: %v", err)
	}
}

// TestRewindTwoOperators: two rewinds at once never interleave: each
// either rewinds every lane or is refused because the other holds the
// stream's lock, and the messages run again once per rewind that
// succeeded, each key's in order. A rewind while another holder (an
// apply) holds the lock is refused and changes nothing.
func TestRewindTwoOperators(t *testing.T) {
	t.Parallel()
	e := startRewindEnv(t, natstest.Start(t).URL(), 4, 1, 5)
	mark := e.rec.mark()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.rewind(e.target, actions.RewindOptions{ToSeq: 31})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		var re *actions.RefusedError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &re) && strings.Contains(err.Error(), "another lanes apply or rewind"):
			t.Logf("refused: %v", err)
		default:
			t.Errorf("rewind: %v", err)
		}
	}
	if ok == 0 {
		t.Fatal("neither rewind succeeded")
	}
	e.rec.waitAgain(t, mark, 31, ok)

	lock, err := converge.AcquireLock(context.Background(), e.conn, e.target.Stream, converge.LockOwner{Host: "elsewhere", PID: 4242, Design: "orders", Command: "lanes apply"}, converge.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	before := e.positions(t)
	_, err = e.rewind(e.target, actions.RewindOptions{ToSeq: 31})
	var re *actions.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "lanes apply (pid 4242") {
		t.Errorf("a rewind under another's lock: %v", err)
	}
	if after := e.positions(t); after != before {
		t.Errorf("a refused rewind changed the lanes:\n%s\nnow:\n%s", before, after)
	}
}

// TestRewindKeyParallelWorkerThatJoinedAfterward: a key-parallel lane's
// worker that took the lanes once they had run everything (its sessions
// began at the lanes' last delivery, with no delivery since) follows a
// rewind: it runs the messages again, each key's in order. (Its session's
// sync check must see that the reset began the delivery sequence again:
// work/keyed.go, sync.)
func TestRewindKeyParallelWorkerThatJoinedAfterward(t *testing.T) {
	t.Parallel()
	url := natstest.Start(t).URL()
	_, js := natstest.Connect(t, url)
	p := testutil.Plan(t, "orders", 4, func(d *planner.Design) { d.Lane.KeysInFlight = 4 })
	natstest.CreateLanes(t, js, p)
	e := &rewindEnv{url: url, js: js, conn: rewindDial(t, url), plan: p, rec: newRewindRec(),
		target: actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}}
	stop := startRewindWorker(t, js, p, e.rec, "a")
	e.publish(t, append(ordercheck.KeysOnEveryLane(t, p), "k-a", "k-b", "k-c", "k-d"), 5)
	stop()
	startRewindWorker(t, js, p, e.rec, "b")
	testutil.WaitFor(t, "b serves every lane", time.Minute, func() bool {
		r, err := health.Inspect(context.Background(), e.conn, health.Options{Stream: p.Stream.Name, Design: p.Design.Name, MaxSubjects: -1})
		if err != nil {
			return false
		}
		for _, l := range r.Lanes {
			if l.Server == nil || l.Server.Instance != "b" || l.Server.Gone || l.Server.Released {
				return false
			}
		}
		return true
	})
	mark := e.rec.mark()
	if _, err := e.rewind(e.target, actions.RewindOptions{ToSeq: 11}); err != nil {
		t.Fatal(err)
	}
	e.rec.waitAgain(t, mark, 11, 1)
}

// TestRewindWhileWorkersRun: a rewind while the worker is busy with the
// lanes' messages (a serial lane with a message in its handler, a
// key-parallel lane with several out). The pause lets each finish what it
// holds; then every key runs its messages from the point on again, in
// stream order, with nothing skipped before or after the rewind.
func TestRewindWhileWorkersRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers and a rewind")
	}
	t.Parallel()
	for _, keys := range []int{1, 4} {
		t.Run(fmt.Sprintf("keys in flight %d", keys), func(t *testing.T) {
			t.Parallel()
			url := natstest.Start(t).URL()
			_, js := natstest.Connect(t, url)
			p := testutil.Plan(t, "orders", 4, func(d *planner.Design) { d.Lane.KeysInFlight = keys })
			natstest.CreateLanes(t, js, p)
			e := &rewindEnv{url: url, js: js, conn: rewindDial(t, url), plan: p, rec: newRewindRec(),
				target: actions.Target{Stream: p.Stream.Name, Design: p.Design.Name}}
			e.rec.work = time.Duration(keys) * 20 * time.Millisecond // runs 2 keys a lane at once
			startRewindWorker(t, js, p, e.rec, "a")
			var subjects []string
			keyNames := append(ordercheck.KeysOnEveryLane(t, p), "k-a", "k-b", "k-c", "k-d")
			for i := 0; i < 10; i++ {
				for _, k := range keyNames {
					s, _ := p.SubjectForKey(k)
					subjects = append(subjects, s)
				}
			}
			natstest.Publish(t, js, subjects...)
			testutil.WaitFor(t, "the worker half way", time.Minute, func() bool {
				e.rec.mu.Lock()
				defer e.rec.mu.Unlock()
				return len(e.rec.keyOf) >= 30
			})
			mark := e.rec.mark()
			const point = 9
			out, err := e.rewind(e.target, actions.RewindOptions{ToSeq: point})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rewound %d lanes: %+v", out.Changed, out.Lanes)
			e.total = len(subjects)
			e.waitIdle(t)
			want := e.rec.from(point)
			testutil.WaitFor(t, "every key ran from the point again", 2*time.Minute, func() bool {
				for k, runs := range e.rec.since(mark) {
					if !slices.Equal(runs[max(len(runs)-len(want[k]), 0):], want[k]) {
						return false
					}
				}
				return len(e.rec.since(mark)) == len(want)
			})
			for k, runs := range e.rec.since(mark) {
				w := want[k]
				for i := 1; i < len(runs); i++ {
					j := slices.Index(w, runs[i])
					if j < 0 || j > 0 && w[j-1] != runs[i-1] {
						t.Errorf("key %s: seq %d ran out of order after the rewind (runs %v, its messages from the point %v)", k, runs[i], runs, w)
					}
				}
			}
			e.rec.mu.Lock()
			defer e.rec.mu.Unlock()
			if len(e.rec.overlap) > 0 {
				t.Errorf("a key ran two messages at once: %v", e.rec.overlap)
			}
		})
	}
}
