package health_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// keyed plans a key-parallel design: its lanes are pinned, with max ack
// pending and a lanes.keys_in_flight tag of k.
func keyed(t *testing.T, name string, k int) *planner.Plan {
	return testutil.Plan(t, name, 2, withLane(func(l *planner.LaneSettings) { l.KeysInFlight = k }))
}

// window records lane i as served by live instance one for an hour, with
// the given window written ago before the snapshot.
func (b *build) window(i int, w membership.Window, ago time.Duration) {
	b.served(i, "one", time.Hour, false, false, 0)
	w.At = at.Add(-ago)
	ls := b.serving().Lanes[b.p.Lanes[i].Name]
	ls.Window = &w
	b.serving().Lanes[b.p.Lanes[i].Name] = ls
}

// outMany puts n messages of lane i out at once (delivered, not acked).
func (b *build) outMany(i, n int) {
	ci := b.lane(i)
	ci.NumAckPending = n
	ci.Delivered.Consumer, ci.Delivered.Stream = uint64(n), uint64(n)
	last := at.Add(-time.Second)
	ci.Delivered.Last = &last
}

// TestJudgeKeyParallel: the rules for key-parallel lanes, each on the
// smallest snapshot that shows it; the whole list of findings is compared.
func TestJudgeKeyParallel(t *testing.T) {
	holder := membership.Window{Size: 8, Held: 8, Running: []string{"bob"}, RunningCount: 1, Keys: 1, Holder: "bob",
		Oldest: &membership.Waiting{Key: "bob", Seq: 12, Since: at.Add(-40 * time.Second)}}
	cases := []struct {
		name     string
		plan     func(t *testing.T) *planner.Plan
		snap     func(b *build)
		want     []string
		contains []string // in the first finding's message
		advice   []string // in the first finding's advice
	}{
		{
			name: "K messages out, some redelivered, pinned with the default TTL: in order, no finding",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "wide", 8) },
			snap: func(b *build) {
				b.outMany(0, 8)
				b.lane(0).NumRedelivered = 2
				b.lane(1).NumAckPending = 3
			},
		},
		{
			name: "max ack pending above 1 without the tag stays critical (and a serial pinned lane's TTL is judged)",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "untagged", 8) },
			snap: func(b *build) { delete(b.lane(1).Config.Metadata, planner.MetaKeysInFlight) },
			want: []string{"critical max_ack_pending untagged-n2-01", "warning ack_wait_below_pinned_ttl untagged-n2-01"},
		},
		{
			name: "a tag that says 1 is a serial lane",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "one", 8) },
			snap: func(b *build) {
				b.lane(0).Config.Metadata[planner.MetaKeysInFlight] = "1"
				b.outMany(0, 2)
				b.lane(0).NumRedelivered = 1
			},
			want: []string{"critical max_ack_pending one-n2-00", "warning ack_wait_below_pinned_ttl one-n2-00", "warning redelivered one-n2-00"},
		},
		{
			name:     "keys_in_flight_mismatch: max ack pending edited by hand",
			plan:     func(t *testing.T) *planner.Plan { return keyed(t, "edited", 8) },
			snap:     func(b *build) { b.lane(1).Config.MaxAckPending = 3 },
			want:     []string{"warning keys_in_flight_mismatch edited-n2-01"},
			contains: []string{"tagged with 8 keys in flight", "max ack pending is 3"},
			advice:   []string{"sets max ack pending back to 8"},
		},
		{
			name: "keys_in_flight_mismatch: lowered to 1 by hand",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "lowered", 4) },
			snap: func(b *build) { b.lane(0).Config.MaxAckPending = 1 },
			want: []string{"warning keys_in_flight_mismatch lowered-n2-00"},
		},
		{
			name: "keys_in_flight_unpinned",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "unpinned", 8) },
			snap: func(b *build) {
				c := &b.lane(0).Config
				c.PriorityPolicy, c.PriorityGroups, c.PinnedTTL = jetstream.PriorityPolicyNone, nil, 0
			},
			want: []string{"warning keys_in_flight_unpinned unpinned-n2-00"},
		},
		{
			name: "key_holds_window: the record's holder fills the window, the server shows it full",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "held", 8) },
			snap: func(b *build) {
				b.outMany(1, 8)
				b.window(1, holder, 2*time.Second)
			},
			want:     []string{"warning key_holds_window held-n2-01"},
			contains: []string{"lane held-n2-01: key bob holds the lane's whole window (8 of 8", "stream sequence 12, has waited 40s"},
			advice:   []string{"key bob on one", "--on-poison park", "exit 65"},
		},
		{
			name: "no key_holds_window once the server shows the lane below its cap (the record is older)",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "moved", 8) },
			snap: func(b *build) {
				b.outMany(1, 3)
				w := holder
				w.Oldest = &membership.Waiting{Key: "bob", Seq: 12, Since: at.Add(-5 * time.Second)}
				b.window(1, w, 9*time.Second)
			},
		},
		{
			name: "key_waiting: another key's message waited longer than the ack wait",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "slowkey", 8) },
			snap: func(b *build) {
				b.outMany(0, 5)
				b.window(0, membership.Window{Size: 8, Held: 5, Running: []string{"alice", "bob", "carol"}, RunningCount: 3, Keys: 3,
					Oldest: &membership.Waiting{Key: "carol", Seq: 40, Since: at.Add(-2 * time.Minute)}}, time.Second)
			},
			want:     []string{"warning key_waiting slowkey-n2-00"},
			contains: []string{"key carol (stream sequence 40) has waited 2m0s", "longer than the lane's ack wait (30s)"},
		},
		{
			name: "a message that waited less than the ack wait is normal",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "busy", 8) },
			snap: func(b *build) {
				b.outMany(0, 5)
				b.window(0, membership.Window{Size: 8, Held: 5, RunningCount: 3, Keys: 3,
					Oldest: &membership.Waiting{Key: "carol", Seq: 40, Since: at.Add(-20 * time.Second)}}, time.Second)
			},
		},
		{
			name: "a holder and another key waiting long: two facts",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "both", 8) },
			snap: func(b *build) {
				b.outMany(0, 8)
				w := holder
				w.Oldest = &membership.Waiting{Key: "carol", Seq: 3, Since: at.Add(-time.Hour)}
				b.window(0, w, time.Second)
			},
			want: []string{"warning key_holds_window both-n2-00", "warning key_waiting both-n2-00"},
		},
		{
			name: "a window recorded by an instance that handed the lane over is not the lane's now",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "handover", 8) },
			snap: func(b *build) {
				b.outMany(0, 8)
				b.window(0, holder, time.Second)
				ls := b.serving().Lanes[b.p.Lanes[0].Name]
				ls.Released, ls.Gone = true, true
				b.serving().Lanes[b.p.Lanes[0].Name] = ls
			},
		},
		{
			name: "a window recorded before its instance took the lane is stale",
			plan: func(t *testing.T) *planner.Plan { return keyed(t, "stale", 8) },
			snap: func(b *build) {
				b.outMany(0, 8)
				b.window(0, holder, 2*time.Hour) // served for an hour
			},
		},
		{
			name: "a window on a serial lane's record is not read",
			plan: func(t *testing.T) *planner.Plan { return testutil.Plan(t, "serial", 2) },
			snap: func(b *build) { b.window(0, holder, time.Second) },
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := snapshot(t, c.plan(t))
			if c.snap != nil {
				c.snap(b)
			}
			r := b.judge()
			if got, want := strings.Join(codes(r), "\n"), strings.Join(c.want, "\n"); got != want {
				t.Fatalf("findings:\n%s\nwant:\n%s", got, want)
			}
			for _, s := range c.contains {
				if !strings.Contains(r.Findings[0].Message, s) {
					t.Fatalf("%s: %q not in %q", r.Findings[0].Code, s, r.Findings[0].Message)
				}
			}
			for _, s := range c.advice {
				if !strings.Contains(r.Findings[0].Advice, s) {
					t.Fatalf("%s: %q not in the advice %q", r.Findings[0].Code, s, r.Findings[0].Advice)
				}
			}
		})
	}
}

// TestJudgeKeyParallelFigures: a lane's keys in flight come from its tag
// (1 for a serial lane lanes created, 0 for a consumer it did not), and
// its window from its live owner's record.
func TestJudgeKeyParallelFigures(t *testing.T) {
	b := snapshot(t, keyed(t, "figs", 16))
	b.outMany(0, 6)
	w := membership.Window{Size: 16, Held: 6, Running: []string{"a", "b"}, RunningCount: 2, Keys: 4,
		Oldest: &membership.Waiting{Key: "c", Seq: 7, Since: at.Add(-3 * time.Second)}}
	b.window(0, w, time.Second)
	r := b.judge()
	l := r.Lane("figs-n2-00")
	if l == nil || l.KeysInFlight != 16 || !l.KeyParallel() || l.Window() == nil || l.Window().Held != 6 || l.Window().RunningCount != 2 {
		t.Fatalf("lane 0: %+v, window %+v", l, l.Window())
	}
	if oldest, waited, ok := l.OldestWaiting(); !ok || oldest.Key != "c" || oldest.Seq != 7 || waited != 3*time.Second {
		t.Fatalf("oldest waiting %+v %s %v", oldest, waited, ok)
	}
	if l1 := r.Lane("figs-n2-01"); l1.Window() != nil || l1.KeysInFlight != 16 {
		t.Fatalf("lane 1 has no record: %+v", l1)
	}
	if len(r.Findings) != 0 {
		t.Fatalf("findings %v", codes(r))
	}
	serial := snapshot(t, testutil.Plan(t, "serial", 2))
	serial.add(jetstream.ConsumerConfig{Durable: "byhand", FilterSubject: "serial.received_from.n2.1.*", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
	sr := serial.judge()
	if l := sr.Lane("serial-n2-00"); l.KeysInFlight != 1 || l.KeyParallel() {
		t.Fatalf("a serial lane: %+v", l)
	}
	if l := sr.Lane("byhand"); l == nil || l.KeysInFlight != 0 || l.KeyParallel() {
		t.Fatalf("a consumer lanes did not create: %+v", l)
	}
}
