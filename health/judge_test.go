package health_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// The judge's tests build snapshots by hand, as Read would get them from a
// server holding a plan's stream and lanes: no server, no clock, no sleep.

// at is the server time of every snapshot.
var at = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type build struct {
	t *testing.T
	p *planner.Plan
	s *health.Snapshot
}

// snapshot is p's stream and lanes, idle and empty, read at `at`.
func snapshot(t *testing.T, p *planner.Plan) *build {
	t.Helper()
	var sc jetstream.StreamConfig
	natstest.Convert(t, p.Stream, &sc)
	b := &build{t: t, p: p, s: &health.Snapshot{Stream: p.Stream.Name, Consumers: jsapi.Empty(),
		Info: &jetstream.StreamInfo{Config: sc}, Heads: map[string]jsapi.Msg{}, Time: at, Requests: 2}}
	for _, c := range p.Consumers {
		var cc jetstream.ConsumerConfig
		natstest.Convert(t, c, &cc)
		b.add(cc)
	}
	return b
}

// add puts a consumer on the stream.
func (b *build) add(c jetstream.ConsumerConfig) *jetstream.ConsumerInfo {
	ci := &jetstream.ConsumerInfo{Stream: b.p.Stream.Name, Name: c.Durable, Config: c, TimeStamp: at}
	b.s.Consumers.Consumers = append(b.s.Consumers.Consumers, ci)
	b.s.Info.State.Consumers++
	return ci
}

// design puts the lanes of another design with the same mapping on the
// stream (two services that each want every message in key order), but
// for the partitions in skip.
func (b *build) design(name string, skip ...int) *planner.Plan {
	d := b.p.Design
	d.Name = name
	p := testutil.PlanDesign(b.t, d)
	b.lanesOf(p, skip...)
	return p
}

// lanesOf puts the lanes of p on the stream, but for the partitions in
// skip.
func (b *build) lanesOf(p *planner.Plan, skip ...int) {
	for i, c := range p.Consumers {
		if slices.Contains(skip, i) {
			continue
		}
		var cc jetstream.ConsumerConfig
		natstest.Convert(b.t, c, &cc)
		b.add(cc)
	}
}

// lane is lane i's consumer info, to edit.
func (b *build) lane(i int) *jetstream.ConsumerInfo {
	for _, ci := range b.s.Consumers.Consumers {
		if ci.Name == b.p.Lanes[i].Name {
			return ci
		}
	}
	b.t.Fatalf("no lane %d", i)
	return nil
}

// drop deletes lane i.
func (b *build) drop(i int) {
	name := b.p.Lanes[i].Name
	cs := b.s.Consumers.Consumers[:0]
	for _, ci := range b.s.Consumers.Consumers {
		if ci.Name != name {
			cs = append(cs, ci)
		}
	}
	b.s.Consumers.Consumers = cs
	b.s.Info.State.Consumers--
}

// store records a message on a stored subject, age ago.
func (b *build) store(subject string, age time.Duration) jsapi.Msg {
	st := &b.s.Info.State
	st.LastSeq++
	st.Msgs++
	if b.s.Subjects == nil {
		b.s.Subjects = map[string]uint64{}
	}
	if b.s.Subjects[subject] == 0 {
		st.NumSubjects++
	}
	b.s.Subjects[subject]++
	return jsapi.Msg{Seq: st.LastSeq, Subject: subject, Time: at.Add(-age)}
}

// backlog publishes n messages of partition i through the mapping, age
// ago, waiting in lane i; the first is the lane's head (Read looked it up).
func (b *build) backlog(i, n int, age time.Duration) {
	ci := b.lane(i)
	for k, s := range natstest.SubjectsFor(b.t, b.p, i, n) {
		stored, _ := b.p.Layout.Transform(s)
		m := b.store(stored, age)
		if k == 0 && ci.NumAckPending == 0 {
			b.s.Heads[ci.Name] = m
		}
		ci.NumPending++
	}
}

// out hands lane i's head message to a worker `deliveries` times, the last
// one `ago` before the snapshot.
func (b *build) out(i, deliveries int, ago time.Duration) {
	ci := b.lane(i)
	head, ok := b.s.Heads[ci.Name]
	if !ok || ci.NumPending == 0 {
		b.t.Fatalf("lane %d has no backlog to hand out", i)
	}
	ci.NumPending--
	ci.NumAckPending = 1
	ci.Delivered.Consumer = ci.AckFloor.Consumer + uint64(deliveries)
	ci.Delivered.Stream = head.Seq
	last := at.Add(-ago)
	ci.Delivered.Last = &last
	if deliveries > 1 {
		ci.NumRedelivered = 1
	}
}

// serving is what the membership bucket says about the plan's design
// (empty until edited: no worker ever ran).
func (b *build) serving() *membership.Serving {
	if b.s.Serving == nil {
		b.s.Serving = map[string]*membership.Serving{}
	}
	d := b.p.Design.Name
	if b.s.Serving[d] == nil {
		b.s.Serving[d] = &membership.Serving{Lanes: map[string]membership.LaneServer{}}
	}
	return b.s.Serving[d]
}

// served records lane i as served by instance since ago; a gone instance
// left (or lost its lease, expired) goneAgo before the snapshot.
func (b *build) served(i int, instance string, ago time.Duration, gone, expired bool, goneAgo time.Duration) {
	sv := b.serving()
	sv.Lanes[b.p.Lanes[i].Name] = membership.LaneServer{Instance: instance, Since: at.Add(-ago), Gone: gone}
	m := membership.Member{Instance: instance, Started: at.Add(-ago), Renewed: at.Add(-time.Second)}
	for _, have := range append(sv.Members, sv.Gone...) {
		if have.Instance == instance {
			return
		}
	}
	if gone {
		m.Renewed, m.Expired = at.Add(-goneAgo), expired
		sv.Gone = append(sv.Gone, m)
		return
	}
	sv.Members = append(sv.Members, m)
}

func (b *build) judge(edit ...func(*health.Options)) *health.Report {
	o := health.Options{Stream: b.p.Stream.Name}
	for _, e := range edit {
		e(&o)
	}
	return health.Judge(b.s, o)
}

// codes lists the findings as "severity code lane".
func codes(r *health.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", f.Severity, f.Code, f.Lane)))
	}
	return out
}

func withLane(f func(*planner.LaneSettings)) func(*planner.Design) {
	return func(d *planner.Design) { f(&d.Lane) }
}

// TestJudgeFindings: each rule, on the smallest snapshot that shows it;
// the whole list of findings is compared, so a rule that fires where it
// should not fails too.
func TestJudgeFindings(t *testing.T) {
	cases := []struct {
		name     string
		plan     func(t *testing.T) *planner.Plan
		snap     func(b *build)
		opts     func(*health.Options)
		want     []string
		contains []string // in the first finding's message
		lacks    []string // in no finding's message
	}{
		{
			name: "healthy: a fresh backlog and lanes at rest",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "healthy", 8) },
			snap: func(b *build) { b.backlog(2, 4, time.Second) },
		},
		{
			name: "max_ack_pending",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "map", 4) },
			snap: func(b *build) { b.lane(1).Config.MaxAckPending = 5 },
			want: []string{"critical max_ack_pending map-n4-01"},
		},
		{
			name: "ack_none",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "acknone", 4) },
			snap: func(b *build) {
				c := &b.lane(0).Config
				c.AckPolicy, c.MaxAckPending = jetstream.AckNonePolicy, 0
			},
			want: []string{"critical ack_none acknone-n4-00"},
		},
		{
			name: "stuck with nobody pulling",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "stuck", 4, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(300 * time.Millisecond) }))
			},
			snap:     func(b *build) { b.backlog(3, 2, time.Second); b.out(3, 1, 600*time.Millisecond) },
			want:     []string{"critical stuck stuck-n4-03"},
			contains: []string{"key k", "out for 600ms, longer than the ack wait (300ms), and no worker is pulling"},
		},
		{
			name: "stuck while a worker pulls: a hung handler",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "hung", 4, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap: func(b *build) {
				b.backlog(0, 1, time.Minute)
				b.out(0, 1, 2*time.Second)
				b.lane(0).NumWaiting = 1
			},
			want:     []string{"critical stuck hung-n4-00"},
			contains: []string{"out for 2s, longer than the ack wait (1s)"},
		},
		{
			name: "out within the ack wait is not stuck",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "busy", 4) },
			snap: func(b *build) { b.backlog(0, 1, time.Minute); b.out(0, 1, 10*time.Second) },
		},
		{
			name: "near_max_deliver",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "poison", 4, withLane(func(l *planner.LaneSettings) { l.MaxDeliver = 3 }))
			},
			snap: func(b *build) { b.backlog(0, 1, time.Minute); b.out(0, 2, time.Second) },
			want: []string{"critical near_max_deliver poison-n4-00"},
		},
		{
			name: "max_deliver_reached is not stuck: the server drops it at the next pull",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "exhausted", 4, withLane(func(l *planner.LaneSettings) {
					l.MaxDeliver, l.AckWait = 2, planner.Duration(200*time.Millisecond)
				}))
			},
			snap: func(b *build) { b.backlog(1, 2, time.Minute); b.out(1, 2, 400*time.Millisecond) },
			want: []string{"warning max_deliver_reached exhausted-n4-01"},
		},
		{
			name: "skipped: messages that used up max deliver, nothing out",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "skipped", 4, withLane(func(l *planner.LaneSettings) { l.MaxDeliver = 2 }))
			},
			snap: func(b *build) { b.lane(1).NumRedelivered = 1 },
			want: []string{"warning skipped skipped-n4-01"},
		},
		{
			name: "redelivered three times: a poison message, no max deliver",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "retry", 4) },
			snap: func(b *build) { b.backlog(2, 1, time.Minute); b.out(2, 3, time.Second) },
			want: []string{"warning redelivered retry-n4-02"},
		},
		{
			name: "redelivered on a lane that lets several out",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "wide", 2) },
			snap: func(b *build) {
				ci := b.lane(0)
				ci.Config.MaxAckPending, ci.NumAckPending, ci.NumRedelivered = 3, 2, 1
			},
			want: []string{"critical max_ack_pending wide-n2-00", "warning redelivered wide-n2-00"},
		},
		{
			name: "ack_wait_below_pinned_ttl, with the server's default pinned TTL",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "pinned", 2, withLane(func(l *planner.LaneSettings) { l.Pinned = true }))
			},
			snap: func(b *build) {
				b.lane(0).Config.PinnedTTL = 0
				b.lane(1).Config.AckWait = 5 * time.Minute // at least the pinned TTL: fine
			},
			want: []string{"warning ack_wait_below_pinned_ttl pinned-n2-00"},
		},
		{
			name: "inactive_threshold on a durable lane",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "inactive", 2) },
			snap: func(b *build) { b.lane(1).Config.InactiveThreshold = time.Hour },
			want: []string{"warning inactive_threshold inactive-n2-01"},
		},
		{
			name:     "gap",
			plan:     func(t *testing.T) *planner.Plan { return testutil.Plan(t, "gap", 8) },
			snap:     func(b *build) { b.drop(3); b.drop(5); b.drop(6) },
			want:     []string{"critical gap"},
			contains: []string{"partition(s) 3, 5-6 of", "(3 of 8)"},
		},
		{
			name: "gap of the design file's layout, with no lanes at all",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "nolanes", 4) },
			snap: func(b *build) {
				for i := range 4 {
					b.drop(i)
				}
				b.s.Info.Config.SubjectTransform = nil
			},
			opts: func(o *health.Options) { o.Plan = testutil.Plan(&testing.T{}, "nolanes", 4) },
			want: []string{"critical gap", "critical no_lanes"},
		},
		{
			name: "overlap: a second tagged lane and a consumer on two partitions",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "overlap", 4) },
			snap: func(b *build) {
				b.add(jetstream.ConsumerConfig{Durable: "overlap-copy", FilterSubject: b.p.Lanes[2].Filter,
					AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, Metadata: b.lane(2).Config.Metadata})
				b.add(jetstream.ConsumerConfig{Durable: "two-partitions", FilterSubjects: []string{b.p.Lanes[0].Filter, b.p.Lanes[1].Filter},
					AckPolicy: jetstream.AckExplicitPolicy})
			},
			want:     []string{"critical overlap overlap-copy", "critical overlap two-partitions"},
			contains: []string{"partition 2 of"},
		},
		{
			name: "two designs on one stream share its transform: each lane gets every message of its partition, not an overlap",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "shared", 4) },
			snap: func(b *build) { b.design("audit") },
		},
		{
			name: "two designs on one stream: a second lane of the same design on a partition is still an overlap",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "shared", 4) },
			snap: func(b *build) {
				b.design("audit")
				b.add(jetstream.ConsumerConfig{Durable: "audit-copy", FilterSubject: b.p.Lanes[1].Filter,
					AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, Metadata: b.lane(1).Config.Metadata})
			},
			want:     []string{"critical overlap audit-copy"},
			contains: []string{"partition 1 of", "(audit-copy, shared-n4-01)"},
		},
		{
			name: "two designs on one stream: a consumer lanes did not create on a partition competes with every design's lane",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "shared", 4) },
			snap: func(b *build) {
				b.design("audit")
				b.add(jetstream.ConsumerConfig{Durable: "worker-1", FilterSubject: b.p.Lanes[3].Filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
			},
			want:     []string{"critical duplicate_durable worker-1"},
			contains: []string{"durable consumers audit-n4-03, shared-n4-03, worker-1 all filter"},
		},
		{
			name:     "two designs on one stream: a partition one design has no lane for is that design's gap",
			plan:     func(t *testing.T) *planner.Plan { return testutil.Plan(t, "shared", 4) },
			snap:     func(b *build) { b.design("audit", 2) },
			want:     []string{"critical gap"},
			contains: []string{"partition(s) 2 of", "have no lane of design audit (1 of 4)"},
		},
		{
			name: "duplicate_durable: a durable per worker on one lane's filter",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "dupe", 4) },
			snap: func(b *build) {
				b.drop(2)
				for _, w := range []string{"worker-1", "worker-2"} {
					b.add(jetstream.ConsumerConfig{Durable: w, FilterSubject: b.p.Lanes[2].Filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
				}
			},
			want:     []string{"critical duplicate_durable worker-1"},
			contains: []string{"durable consumers worker-1, worker-2 all filter"},
		},
		{
			name: "catch_all: an archive consumer on everything",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "archive", 4) },
			snap: func(b *build) {
				b.add(jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy})
			},
			want: []string{"info catch_all audit"},
		},
		{
			name: "misplaced: published straight to a partitioned subject (account mapping)",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "around", 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
			},
			snap: func(b *build) {
				good, _ := b.p.Layout.Transform(natstest.SubjectsFor(b.t, b.p, 4, 1)[0])
				b.store(good, 0)
				wrong := strings.Replace(good, ".n8.4.", ".n8.6.", 1)
				b.store(wrong, 0)
				b.store(wrong, 0)
			},
			want:     []string{"critical misplaced"},
			contains: []string{"2 message(s) on 1 subject(s)", "hashes to partition 4"},
		},
		{
			name: "unpartitioned: stored before the mapping",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "late", 4) },
			snap: func(b *build) {
				b.store("late.received_from.alice", 0)
				b.store("late.received_from.bob", 0)
				b.store("late.received_from.alice", 0)
			},
			want:     []string{"warning unpartitioned"},
			contains: []string{"3 message(s) on 2 subject(s)", "late.received_from.alice"},
		},
		{
			name: "retired: a drained generation's messages only take space",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "gen", 6) },
			snap: func(b *build) {
				b.store("gen.received_from.n4.1.alice", time.Hour)
				b.store("gen.received_from.n4.3.bob", time.Hour)
				b.store("gen.received_from.stray", 0)
				rec, _ := json.Marshal(planner.GenerationRecord{Subjects: "gen.received_from.n4.*.*", RetiredSeq: 2, State: planner.GenerationRetired})
				b.s.Info.Config.Metadata = map[string]string{planner.GenerationKey("gen", 4): string(rec)}
			},
			want:     []string{"warning unpartitioned", "info retired"},
			contains: []string{"1 message(s) on 1 subject(s)", "gen.received_from.stray"},
		},
		{
			name: "retired, nothing stored after the retirement: no message is said to be lost",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "gen", 6) },
			snap: func(b *build) {
				b.store("gen.received_from.n4.1.alice", time.Hour)
				b.store("gen.received_from.n4.3.bob", time.Hour)
				rec, _ := json.Marshal(planner.GenerationRecord{Subjects: "gen.received_from.n4.*.*", RetiredSeq: 2, State: planner.GenerationRetired})
				b.s.Info.Config.Metadata = map[string]string{planner.GenerationKey("gen", 4): string(rec)}
			},
			want:     []string{"info retired"},
			contains: []string{"2 message(s) on 2 subject(s) of design gen's retired generation n4", "processed every message up to stream sequence 2"},
			lacks:    []string{"processed by nobody", "stored after"},
		},
		{
			name: "retired, a message stored after the retirement (around the mapping): processed by nobody, a warning",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "gen", 6) },
			snap: func(b *build) {
				b.store("gen.received_from.n4.1.alice", time.Hour)
				b.store("gen.received_from.n4.3.bob", time.Hour)
				late := b.store("gen.received_from.n4.0.carol", time.Minute)
				rec, _ := json.Marshal(planner.GenerationRecord{Subjects: "gen.received_from.n4.*.*", RetiredSeq: 2, State: planner.GenerationRetired})
				b.s.Info.Config.Metadata = map[string]string{planner.GenerationKey("gen", 4): string(rec)}
				b.s.AfterRetirement = map[string]jsapi.Msg{planner.GenerationKey("gen", 4): late}
			},
			want:     []string{"warning retired"},
			contains: []string{"3 message(s) on 3 subject(s)", "stored after it, the first at seq 3 (gen.received_from.n4.0.carol)", "processed by nobody"},
		},
		{
			name: "placement_unchecked: more subjects than inspect reads",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "manykeys", 2) },
			snap: func(b *build) {
				b.store("manykeys.received_from.a", 0)
				b.store("manykeys.received_from.b", 0)
				b.s.Subjects = nil // Read did not ask for them
			},
			opts: func(o *health.Options) { o.MaxSubjects = 1 },
			want: []string{"info placement_unchecked"},
		},
		{
			name: "placement_unchecked: the subject list did not arrive",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "slow", 2) },
			snap: func(b *build) {
				b.store("slow.received_from.a", 0)
				b.s.Subjects, b.s.SubjectsFailed = nil, "no answer within 5s"
			},
			want:     []string{"info placement_unchecked"},
			contains: []string{"did not arrive: no answer within 5s"},
		},
		{
			name: "nondeterministic_mapping",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "rnd", 2) },
			snap: func(b *build) {
				b.s.Consumers = jsapi.Empty()
				b.s.Info.Config.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "rnd.received_from.*", Destination: "rnd.received_from.n8.{{random(8)}}.{{wildcard(1)}}"}
			},
			want: []string{"critical nondeterministic_mapping"},
		},
		{
			name: "max_consumers below what the lanes need",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "capped", 8) },
			snap: func(b *build) {
				b.s.Info.Config.MaxConsumers = 4
				for i := 4; i < 8; i++ {
					b.drop(i)
				}
			},
			want:     []string{"critical gap", "critical max_consumers"},
			contains: []string{"partition(s) 4-7"},
		},
		{
			name: "max_consumers: more lanes than the server's default cap",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "wide", 1200) },
			snap: func(b *build) {
				b.s.Info.Config.MaxConsumers = -1
				for i := 900; i < 1200; i++ {
					b.drop(i)
				}
			},
			want:     []string{"critical gap", "warning max_consumers"},
			contains: []string{"partition(s) 900-1199"},
		},
		{
			name: "no_workers: a backlog older than the ack wait, nobody pulling",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "idle", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(200 * time.Millisecond) }))
			},
			snap: func(b *build) { b.backlog(1, 2, 400*time.Millisecond) },
			want: []string{"warning no_workers idle-n2-01"},
		},
		{
			name: "no_workers: last delivery long ago",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "quiet", 2) },
			snap: func(b *build) {
				b.backlog(0, 1, time.Second)
				last := at.Add(-time.Hour)
				b.lane(0).Delivered.Last = &last
			},
			want:     []string{"warning no_workers quiet-n2-00"},
			contains: []string{"has not delivered for 1h0m0s"},
		},
		{
			name: "paused with a backlog",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "paused", 2) },
			snap: func(b *build) {
				b.backlog(1, 3, time.Hour)
				b.lane(1).Paused, b.lane(1).PauseRemaining = true, time.Hour
				b.lane(0).Paused = true // nothing waiting: worth knowing only
			},
			want: []string{"warning paused paused-n2-01", "info paused paused-n2-00"},
		},
		{
			name: "held lanes are not merely paused",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "held", 2) },
			snap: func(b *build) {
				for i := range 2 {
					b.lane(i).Paused = true
					b.lane(i).Config.Metadata[planner.MetaHeld] = "repartition"
				}
				b.backlog(0, 2, time.Hour)
			},
			want: []string{"info held held-n2-00", "info held held-n2-01"},
		},
		{
			name: "metadata_mismatch: tagged as one partition, filtering another",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "mixed", 4) },
			snap: func(b *build) {
				b.lane(1).Config.FilterSubject = b.p.Lanes[3].Filter
				b.drop(3)
			},
			want:     []string{"critical gap", "warning metadata_mismatch mixed-n4-01"},
			contains: []string{"partition(s) 3 of"}, // covered by the lane's tag, not its filter
		},
		{
			name: "missing and offline lanes are rows and critical, never gaps",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "cluster", 4) },
			snap: func(b *build) {
				b.drop(1)
				b.drop(2)
				b.s.Consumers.Missing = []string{"cluster-n4-01"}
				b.s.Consumers.Offline = map[string]string{"cluster-n4-02": "peers offline"}
			},
			want: []string{"critical missing cluster-n4-01", "critical offline cluster-n4-02"},
		},
		{
			name: "heads_timeout",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "heads", 2) },
			snap: func(b *build) {
				b.backlog(0, 1, time.Second)
				delete(b.s.Heads, b.p.Lanes[0].Name)
				b.s.HeadsFailed = 1
				b.lane(0).NumWaiting = 1
			},
			want: []string{"info heads_timeout"},
		},
		{
			name: "mapping_drift, no gap: the design file (8) is older than the stream (4); gaps are judged against the stream's mapping",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "drift", 4) },
			opts: func(o *health.Options) { o.Plan = testutil.Plan(&testing.T{}, "drift", 8) },
			want: []string{"warning mapping_drift"},
			contains: []string{"the design file maps drift.received_from.* -> drift.received_from.n8.{{partition(8,1)}}.{{wildcard(1)}} (8 partitions), but the stream maps drift.received_from.* -> drift.received_from.n4.{{partition(4,1)}}.{{wildcard(1)}} (4 partitions)",
				"the server was changed after the file (lanes apply --partitions 4 does that)", "gaps are judged against it"},
		},
		{
			name:     "mapping_drift: a partition without a lane in the mapping in force is still a gap",
			plan:     func(t *testing.T) *planner.Plan { return testutil.Plan(t, "drift", 4) },
			snap:     func(b *build) { b.drop(2) },
			opts:     func(o *health.Options) { o.Plan = testutil.Plan(&testing.T{}, "drift", 8) },
			want:     []string{"critical gap", "warning mapping_drift"},
			contains: []string{"partition(s) 2 of drift.received_from.n4."},
		},
		{
			name: "mapping_drift, no gap, account mapping: the design's lanes say which mapping is in force",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "acct", 4, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
			},
			opts: func(o *health.Options) {
				o.Plan = testutil.Plan(&testing.T{}, "acct", 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
			},
			want:     []string{"warning mapping_drift"},
			contains: []string{"(8 partitions), but design acct's lanes on the server are on acct.received_from.* -> acct.received_from.n4."},
		},
		{
			name: "account mapping mid-repartition: lanes on the file's mapping too, which is judged",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "acct", 4, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
			},
			snap: func(b *build) {
				// the new n8 lanes, held, but partition 5's
				b.lanesOf(testutil.Plan(b.t, "acct", 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount }), 5)
				for _, ci := range b.s.Consumers.Consumers {
					if strings.Contains(ci.Name, "-n8-") {
						ci.Config.Metadata[planner.MetaHeld] = "repartition"
						ci.Paused = true
					}
				}
			},
			opts: func(o *health.Options) {
				o.Plan = testutil.Plan(&testing.T{}, "acct", 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
			},
			want:     []string{"critical gap", "info held acct-n8-00", "info held acct-n8-01", "info held acct-n8-02", "info held acct-n8-03", "info held acct-n8-04", "info held acct-n8-06", "info held acct-n8-07"},
			contains: []string{"partition(s) 5 of acct.received_from.n8."},
		},
		{
			name: "no_lanes of the design asked for",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "alpha", 2) },
			opts: func(o *health.Options) { o.Design = "beta" },
			want: []string{"critical no_lanes"},
		},
		{
			name: "instance_gone: the serving instance's lease expired, nobody took the lane, messages wait",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "dead", 2) },
			snap: func(b *build) {
				b.backlog(1, 3, time.Hour) // would be no_workers too: one finding says it
				b.served(0, "one", time.Hour, true, true, time.Minute)
				b.served(1, "one", time.Hour, true, true, time.Minute)
			},
			want:     []string{"critical instance_gone dead-n2-01", "warning instance_gone dead-n2-00"},
			contains: []string{"served by lanes work instance one, which lost its lease 1m0s ago", "3 message(s) wait"},
		},
		{
			name: "instance_gone: live instances did not take the lane",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "partial", 2) },
			snap: func(b *build) {
				b.served(0, "two", time.Hour, false, false, 0)
				b.served(1, "one", time.Hour, true, true, time.Minute)
			},
			want: []string{"warning instance_gone partial-n2-01"},
		},
		{
			name: "no instance_gone while live instances take the lane over (within the grace)",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "moving", 2) },
			snap: func(b *build) {
				b.served(0, "two", time.Hour, false, false, 0)
				b.served(1, "one", time.Hour, true, true, 2*time.Second)
			},
		},
		{
			name: "long_running: lanes work records a message running far longer than the lane's usual",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "hung", 2) },
			snap: func(b *build) {
				b.served(0, "one", time.Hour, false, false, 0)
				b.served(1, "one", time.Hour, false, false, 0)
				ls := b.serving().Lanes[b.p.Lanes[1].Name]
				ls.InFlight = &membership.InFlight{Seq: 42, Attempt: 1, Since: at.Add(-45 * time.Second), Usual: 3 * time.Millisecond}
				b.serving().Lanes[b.p.Lanes[1].Name] = ls
			},
			want:     []string{"warning long_running hung-n2-01"},
			contains: []string{"stream sequence 42 has been running for 45s on lanes work instance one", "usual processing time is 3ms"},
		},
		{
			name: "handler_outage: lanes work cannot run its handler; the lane's message waits",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "outage", 2) },
			snap: func(b *build) {
				b.served(0, "one", time.Hour, false, false, 0)
				ls := b.serving().Lanes[b.p.Lanes[0].Name]
				ls.Outage = &membership.Outage{Since: at.Add(-12 * time.Second), Tries: 4, Reason: "exit status 127: sh: 1: ./handle.sh: not found"}
				b.serving().Lanes[b.p.Lanes[0].Name] = ls
			},
			want:     []string{"warning handler_outage outage-n2-00"},
			contains: []string{"lanes work instance one cannot run its handler (for 12s: exit status 127"},
		},
		{
			name: "a lane handed over by a live instance, not yet taken, is no instance_gone",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "handover", 2) },
			snap: func(b *build) {
				b.served(0, "one", time.Hour, false, false, 0)
				ls := b.serving().Lanes[b.p.Lanes[0].Name]
				ls.Released, ls.Gone = true, true
				b.serving().Lanes[b.p.Lanes[0].Name] = ls
			},
		},
		{
			name: "an instance that stopped (not died) is intended: a waiting backlog is no_workers",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "stopped", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap: func(b *build) {
				b.backlog(1, 2, time.Minute)
				b.served(1, "one", time.Hour, true, false, time.Minute)
			},
			want: []string{"warning no_workers stopped-n2-01"},
		},
		{
			name: "a lane nobody ever served says only what it said before (no_workers)",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "never", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap: func(b *build) { b.backlog(0, 2, time.Minute); b.serving() },
			want: []string{"warning no_workers never-n2-00"},
		},
		{
			name:     "workers_unknown: the membership bucket could not be read",
			plan:     func(t *testing.T) *planner.Plan { return testutil.Plan(t, "noperm", 2) },
			snap:     func(b *build) { b.s.WorkersFailed = "permission denied" },
			want:     []string{"info workers_unknown"},
			contains: []string{"who serves the lanes is unknown", "permission denied"},
		},
		{
			name: "parked messages are counted (an explicit choice: info); an unstored dead-letter subject is a warning",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "parking", 2) },
			snap: func(b *build) {
				sv := b.serving()
				sv.Members = []membership.Member{{Instance: "one", DeadLetter: "dlq.parking"}}
				sv.Lanes[b.p.Lanes[0].Name] = membership.LaneServer{Instance: "one", DeadLetter: "dlq.lost"} // a record outlives its writer
				b.s.Parked = map[string]health.Parked{"dlq.parking": {Subject: "dlq.parking", Stream: "DLQ", Count: 3}, "dlq.lost": {Subject: "dlq.lost"}}
			},
			want:     []string{"warning dead_letter_unstored", "info parked"},
			contains: []string{"park poison messages on dlq.lost, but no stream stores that subject"},
		},
		{
			name: "a push consumer on a partition is not a lane: no lane findings, an overlap",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "pushed", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap: func(b *build) {
				ci := b.add(jetstream.ConsumerConfig{Durable: "push", DeliverSubject: "deliver.here", FilterSubject: b.p.Lanes[1].Filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
				ci.NumPending = 5
			},
			want:     []string{"critical overlap push"},
			contains: []string{"push consumer push (filter"},
		},
		{
			name: "stuck on a head delivered twice: rejected (nak) and waiting for its redelivery, not a dead worker",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "naked", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap:     func(b *build) { b.backlog(0, 2, time.Minute); b.out(0, 2, 5*time.Second) },
			want:     []string{"warning stuck naked-n2-00"},
			contains: []string{"was delivered 2 times and is not acked", "a worker rejected it (nak)"},
		},
		{
			name: "stuck on a lane a live instance serves: a long job or a hung handler, not a death",
			plan: func(t *testing.T) *planner.Plan {
				return testutil.Plan(t, "longjob", 2, withLane(func(l *planner.LaneSettings) { l.AckWait = planner.Duration(time.Second) }))
			},
			snap: func(b *build) {
				b.backlog(0, 1, time.Minute)
				b.out(0, 1, 5*time.Second)
				b.served(0, "one", time.Hour, false, false, 0)
			},
			want:     []string{"critical stuck longjob-n2-00"},
			contains: []string{"served by live instance one"},
		},
		{
			name: "unusable_mapping: a partition count beyond the bound is reported, not looped over",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "huge", 2) },
			snap: func(b *build) {
				b.s.Consumers = jsapi.Empty()
				b.s.Info.Config.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "huge.*", Destination: "huge.{{partition(2000000000,1)}}.{{wildcard(1)}}"}
				b.add(jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy})
				b.add(jetstream.ConsumerConfig{Durable: "odd", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "huge.7.*",
					Metadata: map[string]string{planner.MetaDesign: "odd", planner.MetaPartition: "7", planner.MetaPartitions: "4294967296",
						planner.MetaSource: "huge.*", planner.MetaDestination: "huge.{{partition(4294967296,1)}}.{{wildcard(1)}}"}})
				b.store("huge.12345.alice", 0)
			},
			want:     []string{"warning unusable_mapping"},
			contains: []string{"more than 16384 lanes"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := snapshot(t, c.plan(t))
			if c.snap != nil {
				c.snap(b)
			}
			var r *health.Report
			done := make(chan struct{})
			go func() {
				defer close(done)
				if c.opts != nil {
					r = b.judge(c.opts)
				} else {
					r = b.judge()
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the judge did not finish: it loops over something unbounded")
			}
			if got, want := strings.Join(codes(r), "\n"), strings.Join(c.want, "\n"); got != want {
				t.Fatalf("findings:\n%s\nwant:\n%s", got, want)
			}
			for _, f := range r.Findings {
				if f.Message == "" || f.Advice == "" {
					t.Fatalf("%s without message or advice: %+v", f.Code, f)
				}
			}
			for _, s := range c.contains {
				if !strings.Contains(r.Findings[0].Message, s) {
					t.Fatalf("%s: %q not in %q", r.Findings[0].Code, s, r.Findings[0].Message)
				}
			}
			for _, s := range c.lacks {
				for _, f := range r.Findings {
					if strings.Contains(f.Message, s) {
						t.Fatalf("%s: %q in %q", f.Code, s, f.Message)
					}
				}
			}
		})
	}
}

// TestJudgeFigures: a lane's figures are the server's, and what follows
// from them: the backlog, how often the head was delivered, its key and
// age, the summary.
func TestJudgeFigures(t *testing.T) {
	p := testutil.Plan(t, "figures", 4, withLane(func(l *planner.LaneSettings) { l.Pinned = true; l.AckWait = planner.Duration(5 * time.Minute) }))
	b := snapshot(t, p)
	b.backlog(1, 4, 90*time.Second)
	b.out(1, 2, time.Second)
	b.backlog(2, 1, time.Second)
	b.lane(3).Paused, b.lane(3).PauseRemaining = true, time.Hour
	b.lane(0).PriorityGroups = []jetstream.PriorityGroupState{{Group: planner.PinnedGroup, PinnedClientID: "worker-a", PinnedTS: at.Add(-time.Minute)}}
	r := b.judge()
	l := r.Lane("figures-n4-01")
	if l == nil || l.Pending != 3 || l.AckPending != 1 || l.Backlog != 4 || l.HeadDeliveries != 2 || l.Redelivered != 1 {
		t.Fatalf("lane 1: %+v", l)
	}
	if age, ok := l.Age(); !ok || age != 90*time.Second || l.Head.Key == "" || !strings.HasPrefix(l.Head.Subject, "figures.received_from.n4.1.") {
		t.Fatalf("lane 1 head %+v, age %s", l.Head, age)
	}
	if ack, ok := l.AckAge(); !ok || ack != time.Second {
		t.Fatalf("ack age %s %v", ack, ok)
	}
	if l0 := r.Lane("figures-n4-00"); l0.PinnedClient != "worker-a" || l0.PinnedTTL != 2*time.Minute || l0.AckPolicy != "explicit" || !l0.Tagged {
		t.Fatalf("lane 0: %+v", l0)
	}
	s := r.Summary
	if s.Lanes != 4 || s.TotalBacklog != 5 || s.MaxBacklog != 4 || s.Hottest != "figures-n4-01" || s.AtCap != 1 || s.Paused != 1 || s.Infos != 1 {
		t.Fatalf("summary %+v; findings %v", s, codes(r))
	}
	if r.Time != at || r.Messages != 5 || r.Subjects != 5 || r.Requests != 2 || r.Consumers != 4 {
		t.Fatalf("report %+v", r)
	}
}

// TestJudgeGenerations: two generations of one design during a
// repartition are two groups of lanes, not an overlap; the new lanes are
// held; a key is placed in both.
func TestJudgeGenerations(t *testing.T) {
	old, next := testutil.Plan(t, "repart", 4), testutil.Plan(t, "repart", 8)
	b := snapshot(t, old)
	for _, c := range next.Consumers {
		var cc jetstream.ConsumerConfig
		natstest.Convert(t, c, &cc)
		cc.Metadata[planner.MetaHeld] = "repartition"
		b.add(cc).Paused = true
	}
	b.s.Info.Config.SubjectTransform.Destination = next.Mapping.Destination // switched
	r := b.judge(func(o *health.Options) { o.Design = "repart" })
	if len(r.Lanes) != 12 || r.Lanes[0].Generation() != "n4" || r.Lanes[4].Generation() != "n8" {
		t.Fatalf("%d lanes, first %s, fifth %s", len(r.Lanes), r.Lanes[0].Name, r.Lanes[4].Name)
	}
	for _, f := range r.Findings {
		if f.Code != "held" {
			t.Errorf("unexpected finding during a repartition: %s %s", f.Code, f.Message)
		}
	}
	places, err := r.Locate("repart.received_from.alice")
	if err != nil || len(places) != 2 || len(places[0].Lanes) != 1 || len(places[1].Lanes) != 1 {
		t.Fatalf("key placements %+v, %v", places, err)
	}
}
