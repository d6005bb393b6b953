package actions_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// skipRun is a worker run judged for a skip: which message each handler
// began and finished, per key, and why a handler was stopped.
type skipRun struct {
	mu       sync.Mutex
	poison   uint64 // its handler blocks until cancelled, or fails
	fails    bool   // the poison fails at once instead of blocking
	began    map[uint64]int
	finished map[string][]uint64 // per key, in the order they finished
	causes   []error             // of the poison's stopped handlers
	keyOf    map[uint64]string
}

func (r *skipRun) handle(ctx context.Context, m *work.Msg) error {
	r.mu.Lock()
	r.began[m.Seq]++
	r.mu.Unlock()
	if m.Seq == r.poison {
		if r.fails {
			return errors.New("poison")
		}
		<-ctx.Done()
		r.mu.Lock()
		r.causes = append(r.causes, context.Cause(ctx))
		r.mu.Unlock()
		return ctx.Err()
	}
	time.Sleep(2 * time.Millisecond)
	r.mu.Lock()
	r.finished[m.Key] = append(r.finished[m.Key], m.Seq)
	r.mu.Unlock()
	return nil
}

func (r *skipRun) beganCount(seq uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.began[seq]
}

func (r *skipRun) done(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := 0
	for _, f := range r.finished {
		c += len(f)
	}
	return c >= n
}

// check: every key's messages finished in stream order, each once; the
// poison never finished and began again only before the skip.
func (r *skipRun) check(t *testing.T, all []uint64, beganBefore int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[uint64]bool{}
	for key, seqs := range r.finished {
		if !slices.IsSorted(seqs) {
			t.Errorf("key %s finished out of order: %v", key, seqs)
		}
		for _, s := range seqs {
			if seen[s] {
				t.Errorf("seq %d finished twice", s)
			}
			seen[s] = true
		}
	}
	for _, s := range all {
		if s != r.poison && !seen[s] {
			t.Errorf("seq %d never finished", s)
		}
	}
	if seen[r.poison] {
		t.Errorf("the skipped seq %d finished", r.poison)
	}
	if n := r.began[r.poison]; n != beganBefore {
		t.Errorf("the skipped seq %d began %d times, %d before the skip: it ran again", r.poison, n, beganBefore)
	}
}

// skipSetup is a design's stream and lanes, a dead-letter stream, and
// messages published on keys of lane 0: the first key's first message
// is the poison.
type skipSetup struct {
	url   string
	js    jetstream.JetStream
	p     *planner.Plan
	conn  *connect.Conn
	lane  string
	keys  []string
	seqs  []uint64 // published, in order
	byKey map[uint64]string
}

func newSkipSetup(t *testing.T, cluster bool, keysInFlight int) *skipSetup {
	t.Helper()
	s := &skipSetup{byKey: map[uint64]string{}}
	replicas := 1
	if cluster {
		cl := natstest.StartCluster(t, 3)
		s.url = cl.Servers[0].URL() + "," + cl.Servers[1].URL()
		replicas = 3
	} else {
		s.url = natstest.Start(t).URL()
	}
	_, s.js = natstest.Connect(t, s.url)
	s.p = testutil.Plan(t, "orders", 2, func(d *planner.Design) {
		d.Lane.KeysInFlight = keysInFlight
		d.Stream.Replicas = replicas
	})
	natstest.CreateLanes(t, s.js, s.p)
	ctx := context.Background()
	if err := natstest.RetryPlacement(ctx, func() error {
		_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}, Replicas: replicas})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.lane = s.p.Consumers[0].Durable
	for i := 0; len(s.keys) < 3; i++ {
		k := fmt.Sprintf("u%d", i)
		subj, _ := s.p.SubjectForKey(k)
		if l, ok := s.p.LaneOf(subj); ok && l.Partition == 0 {
			s.keys = append(s.keys, k)
		}
	}
	s.conn = dial(t, s.url)
	return s
}

// publish n messages per key, round robin.
func (s *skipSetup) publish(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, k := range s.keys {
			subj, _ := s.p.SubjectForKey(k)
			ack, err := s.js.Publish(context.Background(), subj, []byte(k+"-"+strconv.Itoa(i)))
			if err != nil {
				t.Fatal(err)
			}
			s.seqs = append(s.seqs, ack.Sequence)
			s.byKey[ack.Sequence] = k
		}
	}
}

func (s *skipSetup) target(lanes ...string) actions.Target {
	return actions.Target{Stream: s.p.Stream.Name, Design: s.p.Design.Name, Lanes: lanes}
}

func (s *skipSetup) skip(ctx context.Context, o actions.SkipOptions, lanes ...string) (*actions.SkipOutcome, error) {
	if len(lanes) == 0 {
		lanes = []string{s.lane}
	}
	sel, err := actions.Select(ctx, s.conn, s.target(lanes...))
	if err != nil {
		return nil, err
	}
	if o.By == "" {
		o.By = "oncall"
	}
	if o.Wait == 0 {
		o.Wait = 45 * time.Second
	}
	return actions.Skip(ctx, s.conn, sel, o)
}

func (s *skipSetup) startWorker(t *testing.T, name string, h work.Handler) {
	t.Helper()
	worktest.Start(t, s.js, work.Config{Stream: s.p.Stream.Name, Design: s.p.Design.Name, Instance: name, DeadLetter: "dlq.orders",
		Logger: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}, h)
}

func (s *skipSetup) ackFloor(t *testing.T) uint64 {
	t.Helper()
	c, err := s.js.Consumer(context.Background(), s.p.Stream.Name, s.lane)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ci.AckFloor.Stream
}

// fetch pulls up to n messages of the lane without acking them, as a
// worker would (a key-parallel lane is pinned).
func (s *skipSetup) fetch(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	c, err := s.js.Consumer(ctx, s.p.Stream.Name, s.lane)
	if err != nil {
		t.Fatal(err)
	}
	var opts []jetstream.FetchOpt
	if g := c.CachedInfo().Config.PriorityGroups; len(g) > 0 {
		opts = append(opts, jetstream.FetchPriorityGroup(g[0]))
	}
	batch, err := c.Fetch(n, append(opts, jetstream.FetchMaxWait(2*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if err := batch.Error(); err != nil && len(out) == 0 {
		t.Fatalf("fetch: %v", err)
	}
	return out
}

// parked reads the dead-letter stream's messages.
func (s *skipSetup) parked(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := s.js.Stream(ctx, "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestSkipMovesLaneOnPastPoisonHead: with lanes work running, a head
// whose handler blocks (or keeps failing) is skipped: the handler is
// stopped with a cause that says so, the message never runs again, its
// key's next message runs after it, and every key stays in order. Serial
// and key-parallel lanes, term and park (the parked copy names its
// origin), on a single server and on a 3-node cluster.
func TestSkipMovesLaneOnPastPoisonHead(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers and skips, 10s and more")
	}
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cluster bool
		keys    int
		fails   bool
		park    bool
	}{
		{"single node, serial, blocking handler, term", false, 1, false, false},
		{"single node, serial, failing handler, park", false, 1, true, true},
		{"3-node cluster, key-parallel, blocking handler, park", true, 4, false, true},
		{"3-node cluster, key-parallel, failing handler, term", true, 4, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSkipSetup(t, tc.cluster, tc.keys)
			s.publish(t, 5)
			poison := s.seqs[0]
			run := &skipRun{poison: poison, fails: tc.fails, began: map[uint64]int{}, finished: map[string][]uint64{}}
			s.startWorker(t, "a", work.HandlerFunc(run.handle))
			testutil.WaitFor(t, "the poison began", time.Minute, func() bool { return run.beganCount(poison) > 0 })
			if tc.keys > 1 {
				// Other keys go on beside it (until its own key's waiting
				// messages fill the lane's window).
				testutil.WaitFor(t, "other keys ran beside it", time.Minute, func() bool { return run.done(2) })
			}
			ctx := context.Background()
			dry, err := s.skip(ctx, actions.SkipOptions{Seq: poison, Park: tc.park, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if !dry.Changed || !strings.HasPrefix(dry.Result, "would ") || dry.RunningOn != "a" || dry.Key != s.keys[0] || dry.Subject == "" {
				t.Errorf("dry run: %+v", dry)
			}
			beganBefore := run.beganCount(poison)
			out, err := s.skip(ctx, actions.SkipOptions{Seq: poison, Park: tc.park, Reason: "bad payload"})
			if err != nil {
				t.Fatal(err)
			}
			want := "terminated"
			if tc.park {
				want = "parked"
			}
			if !out.Changed || out.Result != want || out.SettledBy != "a" {
				t.Errorf("outcome: %+v, want %s by a", out, want)
			}
			beganBefore = max(beganBefore, run.beganCount(poison)) // a failing one may have begun again meanwhile
			testutil.WaitFor(t, "every other message finished", time.Minute, func() bool { return run.done(len(s.seqs) - 1) })
			if !tc.fails {
				run.mu.Lock()
				if len(run.causes) == 0 || !errors.Is(run.causes[len(run.causes)-1], work.ErrSkipped) {
					t.Errorf("the handler was stopped with %v, want a cause wrapping work.ErrSkipped", run.causes)
				}
				run.mu.Unlock()
			}
			testutil.WaitFor(t, "the lane acked everything", time.Minute, func() bool { return s.ackFloor(t) == s.seqs[len(s.seqs)-1] })
			run.check(t, s.seqs, beganBefore)
			parked := s.parked(t)
			if !tc.park {
				if len(parked) != 0 {
					t.Errorf("%d messages parked, want none", len(parked))
				}
				return
			}
			if len(parked) != 1 {
				t.Fatalf("%d messages parked, want 1", len(parked))
			}
			h := parked[0].Header
			for k, v := range map[string]string{work.HeaderParkedSeq: strconv.FormatUint(poison, 10), work.HeaderParkedLane: s.lane,
				work.HeaderParkedKey: s.keys[0], work.HeaderParkedStream: s.p.Stream.Name, work.HeaderParkedInstance: "a"} {
				if h.Get(k) != v {
					t.Errorf("parked header %s = %q, want %q", k, h.Get(k), v)
				}
			}
			if !strings.Contains(h.Get(work.HeaderParkedReason), "bad payload") || string(parked[0].Data) != s.keys[0]+"-0" {
				t.Errorf("parked copy: reason %q, data %q", h.Get(work.HeaderParkedReason), parked[0].Data)
			}
			// Asked again: it says it is done, and changes nothing.
			again, err := s.skip(ctx, actions.SkipOptions{Seq: poison, Park: tc.park})
			if err != nil || again.Changed || !strings.HasPrefix(again.Result, "already ") {
				t.Errorf("re-run: %+v, %v", again, err)
			}
		})
	}
}

// TestSkipTwoOperatorsAtOnce: two operators skip the same head at the same
// moment: exactly one skip happens (one parked copy, one message past),
// and the lane's next message runs.
func TestSkipTwoOperatorsAtOnce(t *testing.T) {
	t.Parallel()
	s := newSkipSetup(t, false, 1)
	s.publish(t, 3)
	poison := s.seqs[0]
	run := &skipRun{poison: poison, began: map[uint64]int{}, finished: map[string][]uint64{}}
	s.startWorker(t, "a", work.HandlerFunc(run.handle))
	testutil.WaitFor(t, "the poison began", time.Minute, func() bool { return run.beganCount(poison) > 0 })
	var wg sync.WaitGroup
	outs := make([]*actions.SkipOutcome, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.skip(context.Background(), actions.SkipOptions{Seq: poison, Park: true, By: "op" + strconv.Itoa(i)})
		}()
	}
	wg.Wait()
	changed := 0
	for i := range 2 {
		var refused *actions.RefusedError
		switch {
		case errs[i] == nil && outs[i].Changed:
			changed++
		case errs[i] == nil && strings.HasPrefix(outs[i].Result, "already "), errors.As(errs[i], &refused):
		default:
			t.Errorf("operator %d: %+v, %v", i, outs[i], errs[i])
		}
	}
	if changed != 1 {
		t.Errorf("%d operators skipped it, want exactly 1: %+v %v", changed, outs, errs)
	}
	testutil.WaitFor(t, "every other message finished", time.Minute, func() bool { return run.done(len(s.seqs) - 1) })
	run.check(t, s.seqs, 1)
	if n := len(s.parked(t)); n != 1 {
		t.Errorf("%d parked copies, want 1", n)
	}
	// A third operator who still sees the old head is refused.
	if _, err := s.skip(context.Background(), actions.SkipOptions{Seq: s.seqs[1]}); !isRefused(err) {
		t.Errorf("skip of a message the lane has passed: %v, want a refusal", err)
	}
}

// TestSkipWithoutWorker: with no lanes work instance serving the lane,
// lanes skip resets the lane past its head itself (the next message is
// delivered next); on a key-parallel lane it refuses when messages after
// it were delivered; --park needs a known dead-letter subject.
func TestSkipWithoutWorker(t *testing.T) {
	t.Parallel()
	for _, keys := range []int{1, 4} {
		t.Run(fmt.Sprintf("keys in flight %d", keys), func(t *testing.T) {
			t.Parallel()
			s := newSkipSetup(t, false, keys)
			s.publish(t, 2)
			ctx := context.Background()
			if _, err := s.skip(ctx, actions.SkipOptions{Seq: s.seqs[0], Park: true}); !isRefused(err) || !strings.Contains(err.Error(), "--dead-letter") {
				t.Errorf("--park with no dead-letter subject known: %v", err)
			}
			out, err := s.skip(ctx, actions.SkipOptions{Seq: s.seqs[0], Reason: "no worker"})
			if err != nil {
				t.Fatal(err)
			}
			if !out.Changed || out.Result != "terminated" || !strings.Contains(out.SettledBy, "lanes skip") {
				t.Errorf("outcome: %+v", out)
			}
			if f := s.ackFloor(t); f != s.seqs[0] {
				t.Errorf("ack floor %d, want %d", f, s.seqs[0])
			}
			got := s.fetch(t, min(keys, 2))
			if len(got) == 0 {
				t.Fatal("nothing delivered after the skip")
			}
			if m, _ := got[0].Metadata(); m.Sequence.Stream != s.seqs[1] {
				t.Errorf("delivered seq %d next, want %d", m.Sequence.Stream, s.seqs[1])
			}
			if keys > 1 {
				// Two messages are out now, unacknowledged: a reset past the
				// first would deliver the second again.
				if _, err := s.skip(ctx, actions.SkipOptions{Seq: s.seqs[1]}); !isRefused(err) || !strings.Contains(err.Error(), "delivered") {
					t.Errorf("key-parallel lane with messages out: %v", err)
				}
			}
		})
	}
}

// TestSkipRefusesBadInput: an unknown lane or design, two lanes, a
// sequence beyond the stream, not on the lane, not its head, or already
// passed: one clear error each, and nothing changes.
func TestSkipRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newSkipSetup(t, false, 1)
	s.publish(t, 2)
	ctx := context.Background()
	// Lane 0's first message acked: the lane has moved past it.
	got := natstest.Fetch(t, s.js, s.p.Stream.Name, s.lane, 1, true)
	first, _ := got[0].Metadata()
	other := s.p.Consumers[1].Durable
	otherSubj, _ := s.p.SubjectForKey("zz")
	for i := 0; ; i++ {
		if l, _ := s.p.LaneOf(otherSubj); l.Partition == 1 {
			break
		}
		otherSubj, _ = s.p.SubjectForKey("zz" + strconv.Itoa(i))
	}
	ack, err := s.js.Publish(ctx, otherSubj, nil)
	if err != nil {
		t.Fatal(err)
	}
	floor := s.ackFloor(t)
	for _, tc := range []struct {
		name   string
		t      actions.Target
		seq    uint64
		input  bool
		expect string
	}{
		{"unknown lane", s.target("nope"), s.seqs[1], true, `no lane "nope"`},
		{"unknown design", actions.Target{Stream: s.p.Stream.Name, Design: "other", Lanes: []string{s.lane}}, s.seqs[1], true, `design "other" has no lanes`},
		{"two lanes", s.target(s.lane, other), s.seqs[1], true, "one lane"},
		{"beyond the stream", s.target(s.lane), 1000, true, "beyond stream"},
		{"not on the lane", s.target(s.lane), ack.Sequence, true, "not on lane"},
		{"already passed", s.target(s.lane), first.Sequence.Stream, false, "moved past"},
		{"not the head", s.target(s.lane), s.seqs[len(s.seqs)-1], false, "not the head"},
	} {
		var err error
		sel, serr := actions.Select(ctx, s.conn, tc.t)
		if serr != nil {
			err = serr
		} else {
			_, err = actions.Skip(ctx, s.conn, sel, actions.SkipOptions{Seq: tc.seq, By: "x", Wait: time.Second})
		}
		var input *actions.InputError
		if tc.input && !errors.As(err, &input) || !tc.input && !isRefused(err) || err == nil || !strings.Contains(err.Error(), tc.expect) {
			t.Errorf("%s: %v, want a %s error with %q", tc.name, err, map[bool]string{true: "input", false: "refusal"}[tc.input], tc.expect)
		}
	}
	if f := s.ackFloor(t); f != floor {
		t.Errorf("the lane moved from %d to %d", floor, f)
	}
	if kv, err := s.js.KeyValue(ctx, "lanes_work"); err == nil {
		if keys, _ := kv.ListKeys(ctx); keys != nil {
			for k := range keys.Keys() {
				if strings.Contains(k, ".s.") {
					t.Errorf("a skip request was written: %s", k)
				}
			}
		}
	}
}

type tlog struct{ t *testing.T }

func (l tlog) Write(b []byte) (int, error) { l.t.Log(strings.TrimSpace(string(b))); return len(b), nil }

func isRefused(err error) bool {
	var r *actions.RefusedError
	return errors.As(err, &r)
}
