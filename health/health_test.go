package health_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
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

// onLane edits the config of one lane only.
func onLane(p *planner.Plan, partition int, f func(*jetstream.ConsumerConfig)) func(*jetstream.ConsumerConfig) {
	name := p.Lanes[partition].Name
	return func(c *jetstream.ConsumerConfig) {
		if c.Durable == name {
			f(c)
		}
	}
}

func (e *env) read(stream string, o ...func(*health.Options)) *health.Report {
	e.t.Helper()
	opts := health.Options{Stream: stream}
	for _, f := range o {
		f(&opts)
	}
	r, err := health.Read(context.Background(), e.conn, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
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

// TestHealthyHasNoFindings: lanes as planned, messages published and
// processed by workers, and a fresh backlog: nothing to report.
func TestHealthyHasNoFindings(t *testing.T) {
	e := newEnv(t)
	p := natstest.Plan(t, "healthy", 8)
	natstest.CreateLanes(t, e.js, p)
	for part := 0; part < 8; part++ {
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, part, 3)...)
		natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[part].Name, 3, true)
	}
	// A backlog that just arrived is not a fault.
	natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 2, 4)...)
	natstest.WaitPending(t, e.js, p.Stream.Name, p.Lanes[2].Name, 4)
	r := e.read(p.Stream.Name)
	if len(r.Findings) != 0 {
		t.Fatalf("healthy lanes have findings:\n%s", findingsText(r))
	}
	if len(r.Lanes) != 8 || r.Summary.TotalBacklog != 4 || r.Summary.Hottest != p.Lanes[2].Name {
		t.Fatalf("lanes %d, backlog %d, hottest %q", len(r.Lanes), r.Summary.TotalBacklog, r.Summary.Hottest)
	}
	l := r.Lane(p.Lanes[2].Name)
	if l.Head == nil || l.Head.Key == "" || !strings.HasPrefix(l.Head.Subject, "healthy.received_from.n8.2.") {
		t.Fatalf("head of the backlogged lane: %+v", l.Head)
	}
	if age, ok := l.Age(); !ok || age > time.Minute {
		t.Fatalf("lag age %s %v", age, ok)
	}
	// Bounded requests: stream info, one LIST page, one head per
	// backlogged lane (here one), the subject list.
	if r.Requests != 4 {
		t.Fatalf("read took %d requests, want 4", r.Requests)
	}
}

// TestFiguresMatchConsumerInfo: pending, in-flight, redelivered and paused
// lanes report exactly what the server's consumer info says.
func TestFiguresMatchConsumerInfo(t *testing.T) {
	e := newEnv(t)
	p := natstest.Plan(t, "figures", 4)
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
	r := e.read(p.Stream.Name)
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

// TestFindings sets up, on a real server, each fault inspect names, and
// checks that it is named, with its severity and lane.
func TestFindings(t *testing.T) {
	e := newEnv(t)
	t.Run("max_ack_pending", func(t *testing.T) {
		p := natstest.Plan(t, "map", 4)
		natstest.CreateLanes(t, e.js, p, onLane(p, 1, func(c *jetstream.ConsumerConfig) { c.MaxAckPending = 5 }))
		r := e.read(p.Stream.Name)
		mustFind(t, r, "max_ack_pending", p.Lanes[1].Name, health.Critical)
		if len(r.Findings) != 1 {
			t.Fatalf("only one lane is wrong:\n%s", findingsText(r))
		}
	})
	t.Run("ack_none", func(t *testing.T) {
		p := natstest.Plan(t, "acknone", 4)
		natstest.CreateLanes(t, e.js, p, onLane(p, 0, func(c *jetstream.ConsumerConfig) {
			c.AckPolicy, c.MaxAckPending = jetstream.AckNonePolicy, 0
		}))
		mustFind(t, e.read(p.Stream.Name), "ack_none", p.Lanes[0].Name, health.Critical)
	})
	t.Run("stuck", func(t *testing.T) {
		p := natstest.Plan(t, "stuck", 4, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(300 * time.Millisecond) })
		natstest.CreateLanes(t, e.js, p)
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 3, 2)...)
		natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[3].Name, 1, false)
		time.Sleep(600 * time.Millisecond)
		r := e.read(p.Stream.Name)
		f := mustFind(t, r, "stuck", p.Lanes[3].Name, health.Critical)
		if !strings.Contains(f.Message, "key k") || !strings.Contains(f.Message, "no worker is pulling") {
			t.Fatalf("stuck finding should name the key and say nobody pulls: %s", f.Message)
		}
	})
	t.Run("near_max_deliver", func(t *testing.T) {
		p := natstest.Plan(t, "poison", 4, func(d *planner.Design) {
			d.Lane.AckWait = planner.Duration(200 * time.Millisecond)
			d.Lane.MaxDeliver = 3
		})
		natstest.CreateLanes(t, e.js, p)
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 0, 1)...)
		natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[0].Name, 1, false)
		time.Sleep(300 * time.Millisecond)
		natstest.Fetch(t, e.js, p.Stream.Name, p.Lanes[0].Name, 1, false)
		r := e.read(p.Stream.Name)
		mustFind(t, r, "near_max_deliver", p.Lanes[0].Name, health.Critical)
	})
	t.Run("max_deliver_reached_is_not_stuck", func(t *testing.T) {
		// The server drops an exhausted message lazily, on the next pull:
		// until then it is ack pending, but the lane is not stuck.
		p := natstest.Plan(t, "exhausted", 4, func(d *planner.Design) {
			d.Lane.AckWait = planner.Duration(200 * time.Millisecond)
			d.Lane.MaxDeliver = 2
		})
		natstest.CreateLanes(t, e.js, p)
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 1, 2)...)
		lane := p.Lanes[1].Name
		natstest.Fetch(t, e.js, p.Stream.Name, lane, 1, false)
		time.Sleep(300 * time.Millisecond)
		natstest.Fetch(t, e.js, p.Stream.Name, lane, 1, false)
		time.Sleep(400 * time.Millisecond)
		r := e.read(p.Stream.Name)
		if l := r.Lane(lane); l.AckPending != 1 {
			t.Fatalf("the exhausted message should still be ack pending: %+v", l)
		}
		mustFind(t, r, "max_deliver_reached", lane, health.Warning)
		if f := find(r, "stuck", lane); f != nil {
			t.Fatalf("an exhausted head is not a stuck lane: %s", f.Message)
		}
		// The next pull drops it and the lane moves on; the drop is reported.
		natstest.Fetch(t, e.js, p.Stream.Name, lane, 1, true)
		r = e.read(p.Stream.Name)
		mustFind(t, r, "skipped", lane, health.Warning)
	})
	t.Run("ack_wait_below_pinned_ttl", func(t *testing.T) {
		p := natstest.Plan(t, "pinned", 2, func(d *planner.Design) { d.Lane.Pinned = true })
		natstest.CreateLanes(t, e.js, p)
		r := e.read(p.Stream.Name)
		mustFind(t, r, "ack_wait_below_pinned_ttl", p.Lanes[0].Name, health.Warning)
		if r.Lanes[0].PinnedTTL != 2*time.Minute {
			t.Fatalf("pinned TTL %s", r.Lanes[0].PinnedTTL)
		}
	})
	t.Run("gap", func(t *testing.T) {
		p := natstest.Plan(t, "gap", 8)
		natstest.CreateLanes(t, e.js, p)
		for _, part := range []int{3, 5, 6} {
			if err := e.js.DeleteConsumer(context.Background(), p.Stream.Name, p.Lanes[part].Name); err != nil {
				t.Fatal(err)
			}
		}
		f := mustFind(t, e.read(p.Stream.Name), "gap", "", health.Critical)
		if !strings.Contains(f.Message, "3, 5-6") {
			t.Fatalf("gap finding should name partitions 3, 5-6: %s", f.Message)
		}
	})
	t.Run("overlap", func(t *testing.T) {
		p := natstest.Plan(t, "overlap", 4)
		natstest.CreateLanes(t, e.js, p)
		// A second lane-tagged consumer on partition 2, and a consumer
		// taking partitions 0 and 1 besides their lanes.
		copyCfg := jetstream.ConsumerConfig{Durable: "overlap-copy", FilterSubject: p.Lanes[2].Filter,
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, Metadata: p.Consumers[2].Metadata}
		two := jetstream.ConsumerConfig{Durable: "two-partitions", FilterSubjects: []string{p.Lanes[0].Filter, p.Lanes[1].Filter},
			AckPolicy: jetstream.AckExplicitPolicy}
		for _, c := range []jetstream.ConsumerConfig{copyCfg, two} {
			if _, err := e.js.CreateConsumer(context.Background(), p.Stream.Name, c); err != nil {
				t.Fatal(err)
			}
		}
		r := e.read(p.Stream.Name)
		f := mustFind(t, r, "overlap", "overlap-copy", health.Critical)
		if !strings.Contains(f.Message, "partition 2") {
			t.Fatal(f.Message)
		}
		f = mustFind(t, r, "overlap", "two-partitions", health.Critical)
		if !strings.Contains(f.Message, "0-1") {
			t.Fatal(f.Message)
		}
	})
	t.Run("duplicate_durable", func(t *testing.T) {
		p := natstest.Plan(t, "dupe", 4)
		natstest.CreateLanes(t, e.js, p)
		for _, w := range []string{"worker-1", "worker-2"} {
			if _, err := e.js.CreateConsumer(context.Background(), p.Stream.Name, jetstream.ConsumerConfig{Durable: w,
				FilterSubject: p.Lanes[2].Filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
				t.Fatal(err)
			}
		}
		r := e.read(p.Stream.Name)
		f := mustFind(t, r, "duplicate_durable", "worker-1", health.Critical)
		if !strings.Contains(f.Message, "worker-2") || !strings.Contains(f.Message, p.Lanes[2].Name) {
			t.Fatal(f.Message)
		}
		// Lanes lanes did not create are recognised by their filter.
		if l := r.Lane("worker-1"); l == nil || l.Tagged || l.Partition != 2 || l.Partitions != 4 {
			t.Fatalf("worker-1 not inferred as a partition 2 lane: %+v", l)
		}
	})
	t.Run("misplaced", func(t *testing.T) {
		// Account mapping: the stream stores partitioned subjects, so a
		// publish straight to one bypasses the mapping.
		p := natstest.Plan(t, "around", 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
		natstest.CreateLanes(t, e.js, p)
		good, _ := p.Layout.Transform(natstest.SubjectsFor(t, p, 4, 1)[0])
		wrong := strings.Replace(good, ".n8.4.", ".n8.6.", 1)
		natstest.Publish(t, e.js, good, wrong, wrong)
		r := e.read(p.Stream.Name)
		f := mustFind(t, r, "misplaced", "", health.Critical)
		if !strings.Contains(f.Message, "2 message(s) on 1 subject(s)") || !strings.Contains(f.Message, "hashes to partition 4") {
			t.Fatal(f.Message)
		}
		if find(r, "unpartitioned", "") != nil || find(r, "gap", "") != nil {
			t.Fatalf("unexpected findings:\n%s", findingsText(r))
		}
	})
	t.Run("unpartitioned", func(t *testing.T) {
		// Messages stored before the stream got its mapping stay unpartitioned.
		p := natstest.Plan(t, "late", 4)
		if _, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: p.Stream.Name, Subjects: p.Stream.Subjects}); err != nil {
			t.Fatal(err)
		}
		natstest.Publish(t, e.js, "late.received_from.alice", "late.received_from.bob", "late.received_from.alice")
		natstest.CreateLanes(t, e.js, p)
		f := mustFind(t, e.read(p.Stream.Name), "unpartitioned", "", health.Warning)
		if !strings.Contains(f.Message, "3 message(s) on 2 subject(s)") || !strings.Contains(f.Message, "late.received_from.alice") {
			t.Fatal(f.Message)
		}
	})
	t.Run("placement_unchecked", func(t *testing.T) {
		p := natstest.Plan(t, "manykeys", 2)
		natstest.CreateLanes(t, e.js, p)
		natstest.Publish(t, e.js, "manykeys.received_from.a", "manykeys.received_from.b")
		r := e.read(p.Stream.Name, func(o *health.Options) { o.MaxSubjects = 1 })
		mustFind(t, r, "placement_unchecked", "", health.Info)
		heads := 0
		for _, l := range r.Lanes {
			if l.Backlog > 0 {
				heads++
			}
		}
		if r.Requests != 2+heads { // stream info, one LIST page, the heads, no subject list
			t.Fatalf("%d requests for %d heads", r.Requests, heads)
		}
	})
	t.Run("nondeterministic_mapping", func(t *testing.T) {
		if _, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "RANDOM", Subjects: []string{"rnd.received_from.*"},
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: "rnd.received_from.*", Destination: "rnd.received_from.n8.{{random(8)}}.{{wildcard(1)}}"}}); err != nil {
			t.Fatal(err)
		}
		mustFind(t, e.read("RANDOM"), "nondeterministic_mapping", "", health.Critical)
	})
	t.Run("max_consumers", func(t *testing.T) {
		p := natstest.Plan(t, "capped", 8)
		p.Stream.MaxConsumers = 4
		p.Consumers = p.Consumers[:4]
		natstest.CreateLanes(t, e.js, p)
		r := e.read(p.Stream.Name, func(o *health.Options) { o.Plan = natstest.Plan(t, "capped", 8) })
		f := mustFind(t, r, "max_consumers", "", health.Critical)
		if !strings.Contains(f.Message, "allows 4 consumers but its lanes need 8") {
			t.Fatal(f.Message)
		}
		mustFind(t, r, "gap", "", health.Critical)
	})
	t.Run("no_workers", func(t *testing.T) {
		p := natstest.Plan(t, "idle", 2, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(200 * time.Millisecond) })
		natstest.CreateLanes(t, e.js, p)
		natstest.Publish(t, e.js, natstest.SubjectsFor(t, p, 1, 2)...)
		time.Sleep(400 * time.Millisecond)
		mustFind(t, e.read(p.Stream.Name), "no_workers", p.Lanes[1].Name, health.Warning)
	})
	t.Run("held", func(t *testing.T) {
		p := natstest.Plan(t, "held", 2)
		natstest.CreateLanes(t, e.js, p, func(c *jetstream.ConsumerConfig) {
			c.PauseUntil = ptr(time.Now().Add(time.Hour))
			c.Metadata[health.MetaHeld] = "repartition"
		})
		r := e.read(p.Stream.Name)
		mustFind(t, r, "held", p.Lanes[0].Name, health.Info)
		if find(r, "paused", "") != nil {
			t.Fatalf("held lanes are not merely paused:\n%s", findingsText(r))
		}
	})
}

// TestRepartitionGenerations: two generations of one design on one stream
// are two groups of lanes, not an overlap, and new lanes are held.
func TestRepartitionGenerations(t *testing.T) {
	e := newEnv(t)
	old := natstest.Plan(t, "repart", 4)
	next := natstest.Plan(t, "repart", 8)
	natstest.CreateLanes(t, e.js, old)
	natstest.CreateLanes(t, e.js, next, func(c *jetstream.ConsumerConfig) {
		c.PauseUntil = ptr(time.Now().Add(time.Hour))
		c.Metadata[health.MetaHeld] = "repartition"
	})
	r := e.read(old.Stream.Name, func(o *health.Options) { o.Design = "repart" })
	if len(r.Lanes) != 12 {
		t.Fatalf("want 4 + 8 lanes, got %d", len(r.Lanes))
	}
	for _, f := range r.Findings {
		if f.Code != "held" && f.Code != "mapping_drift" {
			t.Errorf("unexpected finding during a repartition: %s %s", f.Code, f.Message)
		}
	}
	if r.Lanes[0].Generation() != "n4" || r.Lanes[4].Generation() != "n8" {
		t.Fatalf("lanes not grouped by generation: %s, %s", r.Lanes[0].Name, r.Lanes[4].Name)
	}
	// The key answer names the lane of each generation.
	places, err := r.Locate("repart.received_from.alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(places) != 2 || len(places[0].Lanes) != 1 || len(places[1].Lanes) != 1 {
		t.Fatalf("key placements: %+v", places)
	}
}

// TestDesignFilterAndNoLanes: --design keeps one design's lanes; a design
// with no lanes on the stream is a finding.
func TestDesignFilterAndNoLanes(t *testing.T) {
	e := newEnv(t)
	p := natstest.Plan(t, "alpha", 2)
	natstest.CreateLanes(t, e.js, p)
	r := e.read(p.Stream.Name, func(o *health.Options) { o.Design = "beta" })
	mustFind(t, r, "no_lanes", "", health.Critical)
	if _, err := health.Read(context.Background(), e.conn, health.Options{Stream: "NOPE"}); err == nil || !strings.Contains(err.Error(), "stream not found") {
		t.Fatalf("missing stream: %v", err)
	}
}
