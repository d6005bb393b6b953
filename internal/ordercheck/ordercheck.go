// Package ordercheck judges real lanes work runs with the project's order
// judge (sim/judge): a known sequence of messages is published on a
// design's keys, every execution of a handler reports when it began and
// how it ended, and the judge counts per-key order violations,
// redeliveries and what never ran. Tests only.
//
// The stream must be fresh: a message's stream sequence is its index in
// the sequence plus one.
package ordercheck

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/workload"
)

// Run is one judged run.
type Run struct {
	W     *workload.Workload
	Rec   *judge.Recorder
	start time.Time
	lanes int

	mu    sync.Mutex
	work  func(instance string) time.Duration // how long a handler works, per instance
	execs map[string]int                      // executions per instance
	began map[int]time.Time                   // per message, its first execution's beginning
	done  map[int]bool                        // per message, finished at least once
}

// New makes a run of perKey messages for each of keys, round robin, on
// plan p's subjects. Every handler works for work(instance) (a handler
// cancelled first reports a crash: nothing applied).
func New(t testing.TB, p *planner.Plan, keys []string, perKey int, work func(instance string) time.Duration) *Run {
	t.Helper()
	ks, err := workload.NamedKeys(keys, p.SubjectForKey)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]int, 0, len(keys)*perKey)
	for i := 0; i < perKey; i++ {
		for k := range keys {
			order = append(order, k)
		}
	}
	w, err := workload.Sequence(workload.Spec{Keys: ks}, order)
	if err != nil {
		t.Fatal(err)
	}
	partition := make([]int, len(keys))
	for k, s := range ks.Subjects {
		l, ok := p.LaneOf(s)
		if !ok {
			t.Fatalf("no lane for %s", s)
		}
		partition[k] = l.Partition
	}
	laneOf := func(msg int) int { return partition[w.Messages[msg].Key] }
	return &Run{W: w, Rec: judge.New(w, "lanes work", p.Design.Partitions, 1, laneOf, judge.Plain),
		start: time.Now(), lanes: p.Design.Partitions, work: work, execs: map[string]int{}, began: map[int]time.Time{}, done: map[int]bool{}}
}

// KeysOnEveryLane finds one key per partition of p: k0, k1, ... in turn.
func KeysOnEveryLane(t testing.TB, p *planner.Plan) []string {
	t.Helper()
	keys := make([]string, p.Design.Partitions)
	found := 0
	for i := 0; found < len(keys) && i < 100000; i++ {
		k := fmt.Sprintf("k%d", i)
		s, err := p.SubjectForKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := p.LaneOf(s); ok && keys[l.Partition] == "" {
			keys[l.Partition] = k
			found++
		}
	}
	if found < len(keys) {
		t.Fatalf("no key found for some of the %d partitions", len(keys))
	}
	return keys
}

// SetWork changes how long handlers work from now on.
func (r *Run) SetWork(work func(instance string) time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.work = work
}

// Publish publishes the messages in order, every gap (0: at once), and
// returns when all are stored; it stops early when ctx ends.
func (r *Run) Publish(ctx context.Context, t testing.TB, js jetstream.JetStream, gap time.Duration) {
	t.Helper()
	r.PublishRange(ctx, t, js, 0, len(r.W.Messages), gap)
}

// PublishRange publishes messages from to to-1 (0-based) in order.
func (r *Run) PublishRange(ctx context.Context, t testing.TB, js jetstream.JetStream, from, to int, gap time.Duration) {
	t.Helper()
	for i := from; i < to; i++ {
		if gap > 0 && i > from {
			select {
			case <-ctx.Done():
				return
			case <-time.After(gap):
			}
		}
		// A publish that got no answer (a server restarting) is sent
		// again with the same message ID: the stream stores it once.
		var ack *jetstream.PubAck
		var err error
		for try := 0; try < 6; try++ {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ack, err = js.Publish(pctx, r.W.Subject(i), []byte(strconv.Itoa(i)), jetstream.WithMsgID("ordercheck-"+strconv.Itoa(i)))
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("publish message %d: %v", i+1, err)
			}
			return
		}
		if ack.Sequence != uint64(i+1) {
			t.Errorf("message %d stored at sequence %d: the stream was not fresh", i+1, ack.Sequence)
			return
		}
	}
}

// Stalls is, for messages from to to-1, how long after since each first
// began (messages that have not begun are missing).
func (r *Run) Stalls(from, to int, since time.Time) map[int]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]time.Duration{}
	for i := from; i < to; i++ {
		if at, ok := r.began[i]; ok {
			out[i] = at.Sub(since)
		}
	}
	return out
}

// DoneUpTo reports whether every message before to has finished.
func (r *Run) DoneUpTo(to int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < to; i++ {
		if !r.done[i] {
			return false
		}
	}
	return true
}

// Execute runs one execution of the message at stream sequence seq on
// lane partition by instance: it reports its beginning, works, and
// reports a crash if ctx ends first. It returns whether it finished.
func (r *Run) Execute(ctx context.Context, instance string, partition int, seq uint64) bool {
	msg := int(seq) - 1
	if msg < 0 || msg >= len(r.W.Messages) {
		return true // not one of the run's messages
	}
	r.mu.Lock()
	d := r.work(instance)
	r.execs[instance]++
	if _, ok := r.began[msg]; !ok {
		r.began[msg] = time.Now()
	}
	r.mu.Unlock()
	e := r.Rec.Begin(msg, partition, time.Since(r.start))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		r.Rec.End(e, time.Since(r.start), judge.Done)
		r.mu.Lock()
		r.done[msg] = true
		r.mu.Unlock()
		return true
	case <-ctx.Done():
		r.Rec.End(e, time.Since(r.start), judge.Crashed)
		return false
	}
}

// Executions counts the executions each instance began.
func (r *Run) Executions() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.execs {
		out[k] = v
	}
	return out
}

// Handler is an HTTP handler service for lanes work --http: each POST is
// an execution (Lanes-Instance, Lanes-Partition, Lanes-Seq); 200 when it
// finished. It is closed when the test ends.
func (r *Run) Handler(t testing.TB) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		seq, _ := strconv.ParseUint(req.Header.Get("Lanes-Seq"), 10, 64)
		part, _ := strconv.Atoi(req.Header.Get("Lanes-Partition"))
		if !r.Execute(req.Context(), req.Header.Get("Lanes-Instance"), part, seq) {
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Done reports whether every message has finished at least once.
func (r *Run) Done() bool { return r.Rec.Result().Unfinished == 0 }

// Check fails the test on any order violation or message never finished,
// and returns the result for further checks.
func (r *Run) Check(t testing.TB) judge.Result {
	t.Helper()
	res := r.Rec.Result()
	if res.OrderViolations != 0 {
		t.Errorf("%d order violations (a key's message began before its predecessor finished, beside an earlier one, or after a later one)", res.OrderViolations)
	}
	if res.Unfinished != 0 {
		t.Errorf("%d of %d messages never finished", res.Unfinished, res.Messages)
	}
	if !res.FinalStateCorrect {
		t.Errorf("the final state is not every key's last message")
	}
	t.Logf("judge: %s", Summary(res))
	return res
}

// Summary is one line of the judge's figures.
func Summary(res judge.Result) string {
	return fmt.Sprintf("%d messages, %d executions, %d redelivered, %d duplicates, %d crashed, %d violations, %d unfinished",
		res.Messages, res.Executions, res.Redeliveries, res.Duplicates, res.Crashes, res.OrderViolations, res.Unfinished)
}
