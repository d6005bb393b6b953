package health_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// env is one server shared by the scenarios of a test; each scenario has
// its own stream and subjects.
type env struct {
	t    *testing.T
	srv  *natstest.Server
	js   jetstream.JetStream
	conn *connect.Conn
}

func newEnv(t *testing.T) *env {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	conn, err := connect.Open(context.Background(), connect.Options{Server: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &env{t: t, srv: srv, js: js, conn: conn}
}

// The tests here are Read's: what a real server answers, and that its
// answer is complete and bounded. The findings are judged on hand-made
// snapshots in judge_test.go.

// onLane edits the config of one lane only.
func onLane(p *planner.Plan, partition int, f func(*jetstream.ConsumerConfig)) func(*jetstream.ConsumerConfig) {
	name := p.Lanes[partition].Name
	return func(c *jetstream.ConsumerConfig) {
		if c.Durable == name {
			f(c)
		}
	}
}

func (e *env) read(stream string, o ...func(*health.Options)) (*health.Snapshot, *health.Report) {
	e.t.Helper()
	opts := health.Options{Stream: stream}
	for _, f := range o {
		f(&opts)
	}
	s, err := health.Read(context.Background(), e.conn, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return s, health.Judge(s, opts)
}

func findingsText(r *health.Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  %s %s [%s] %s\n", f.Severity, f.Code, f.Lane, f.Message)
	}
	return b.String()
}

func find(r *health.Report, code, lane string) *health.Finding {
	for i, f := range r.Findings {
		if f.Code == code && (lane == "" || f.Lane == lane) {
			return &r.Findings[i]
		}
	}
	return nil
}

func mustFind(t *testing.T, r *health.Report, code, lane string, sev health.Severity) *health.Finding {
	t.Helper()
	f := find(r, code, lane)
	if f == nil {
		t.Fatalf("no %s finding for lane %q; findings:\n%s", code, lane, findingsText(r))
	}
	if f.Severity != sev {
		t.Fatalf("%s finding has severity %s, want %s", code, f.Severity, sev)
	}
	if f.Advice == "" || f.Message == "" {
		t.Fatalf("%s finding without message or advice: %+v", code, f)
	}
	return f
}

// TestReadSnapshot: lanes as planned, messages published and processed by
// workers, and a fresh backlog on one lane: the snapshot holds the stream,
// every consumer, the head of the one backlogged lane (and no other) and
// the subject counts, in four requests; judged, it has no findings.
func TestReadSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := testutil.Plan(t, "healthy", 8)
	natstest.CreateLanes(t, e.js, p)
	for part := 0; part < 8; part++ {
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, part, 3)...)
		natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[part].Name, 3, true)
	}
	natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 2, 4)...)
	natstest.WaitPending(t, e.js, p.Stream.Name, p.Lanes[2].Name, 4)
	s, r := e.read(p.Stream.Name)
	if s.Info.Config.Name != p.Stream.Name || s.Info.State.Msgs != 28 || len(s.Consumers.Consumers) != 8 {
		t.Fatalf("stream %s with %d messages, %d consumers", s.Info.Config.Name, s.Info.State.Msgs, len(s.Consumers.Consumers))
	}
	head, ok := s.Heads[p.Lanes[2].Name]
	if len(s.Heads) != 1 || !ok || !strings.HasPrefix(head.Subject, "healthy.received_from.n8.2.") || head.Seq != 25 || time.Since(head.Time) > time.Minute {
		t.Fatalf("heads %+v", s.Heads)
	}
	total := uint64(0)
	for _, n := range s.Subjects {
		total += n
	}
	// Partition 2's first three subjects got a second message.
	if len(s.Subjects) != 25 || total != 28 || s.SubjectsFailed != "" || s.HeadsFailed != 0 {
		t.Fatalf("%d subjects with %d messages (%q), %d heads failed", len(s.Subjects), total, s.SubjectsFailed, s.HeadsFailed)
	}
	// Bounded requests: stream info, one LIST page, one head per
	// backlogged lane (here one), the subject list.
	if s.Requests != 4 {
		t.Fatalf("read took %d requests, want 4", s.Requests)
	}
	if len(r.Findings) != 0 || r.Summary.Hottest != p.Lanes[2].Name || r.Lane(p.Lanes[2].Name).Head.Key == "" {
		t.Fatalf("healthy lanes judged:\n%s", findingsText(r))
	}
}

// TestReadBounds: what Read leaves out when told to, and a missing stream.
func TestReadBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := testutil.Plan(t, "bounds", 2)
	natstest.CreateLanes(t, e.js, p)
	natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 0, 2)...)
	natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 1, 1)...)
	natstest.WaitPending(t, e.js, p.Stream.Name, p.Lanes[0].Name, 2)
	natstest.WaitPending(t, e.js, p.Stream.Name, p.Lanes[1].Name, 1) // both lanes backlogged: two heads
	s, r := e.read(p.Stream.Name, func(o *health.Options) { o.MaxSubjects = 1 })
	if s.Subjects != nil || s.Requests != 2+2 || len(s.Heads) != 2 { // stream info, one LIST page, two heads
		t.Fatalf("subjects %v, %d requests, %d heads", s.Subjects, s.Requests, len(s.Heads))
	}
	mustFind(t, r, "placement_unchecked", "", health.Info)
	s, _ = e.read(p.Stream.Name, func(o *health.Options) { o.MaxSubjects, o.SkipHeads = -1, true })
	if s.Subjects != nil || len(s.Heads) != 0 || s.Requests != 2 {
		t.Fatalf("subjects %v, heads %v, %d requests", s.Subjects, s.Heads, s.Requests)
	}
	if _, err := health.Read(context.Background(), e.conn, health.Options{Stream: "NOPE"}); !errors.Is(err, health.ErrStreamNotFound) || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("missing stream: %v", err)
	}
}

// TestFiguresMatchConsumerInfo: pending, in-flight, redelivered and paused
// lanes report exactly what the server's consumer info says, and the
// server counts a redelivery as the judge expects (HeadDeliveries).
func TestFiguresMatchConsumerInfo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := testutil.Plan(t, "figures", 4)
	natstest.CreateLanes(t, e.js, p,
		onLane(p, 2, func(c *jetstream.ConsumerConfig) { c.AckWait = 300 * time.Millisecond }),
		onLane(p, 3, func(c *jetstream.ConsumerConfig) { c.PauseUntil = ptr(time.Now().Add(time.Hour)) }))
	for part := 0; part < 4; part++ {
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, part, 5)...)
	}
	natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[1].Name, 1, true)  // acked one
	natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[1].Name, 1, false) // one in flight
	natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[2].Name, 1, false)
	time.Sleep(500 * time.Millisecond)
	natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[2].Name, 1, false) // redelivered
	for lane, pending := range []uint64{5, 3, 4, 5} {
		natstest.WaitPending(t, e.js, p.Stream.Name, p.Lanes[lane].Name, pending)
	}
	_, r := e.read(p.Stream.Name)
	for _, lane := range p.Lanes {
		ci, err := e.js.Consumer(context.Background(), p.Stream.Name, lane.Name)
		if err != nil {
			t.Fatal(err)
		}
		info := ci.CachedInfo()
		l := r.Lane(lane.Name)
		got := fmt.Sprint(l.Pending, l.AckPending, l.MaxAckPending, l.Redelivered, l.Waiting, l.DeliveredSeq, l.AckFloorSeq, l.Paused, l.Partition)
		want := fmt.Sprint(info.NumPending, info.NumAckPending, info.Config.MaxAckPending, info.NumRedelivered, info.NumWaiting,
			info.Delivered.Stream, info.AckFloor.Stream, info.Paused, lane.Partition)
		if got != want {
			t.Errorf("%s: report %s, server %s", lane.Name, got, want)
		}
	}
	if l := r.Lane(p.Lanes[2].Name); l.Redelivered != 1 || l.HeadDeliveries != 2 || l.AckPending != 1 {
		t.Errorf("redelivered lane: %+v", l)
	}
	if l := r.Lane(p.Lanes[1].Name); l.AckPending != 1 || l.Pending != 3 || l.Backlog != 4 || l.Head == nil || l.Head.Seq != l.AckFloorSeq+0 && l.Head.Seq <= l.AckFloorSeq {
		t.Errorf("in-flight lane: %+v", l)
	}
	if l := r.Lane(p.Lanes[3].Name); !l.Paused || l.PauseRemaining <= 0 {
		t.Errorf("paused lane: %+v", l)
	}
	mustFind(t, r, "paused", p.Lanes[3].Name, health.Warning)
}

func ptr[T any](v T) *T { return &v }
