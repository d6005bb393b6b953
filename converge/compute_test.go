package converge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// Compute is pure: these tests give it hand-made live states and check the
// decisions, in particular the repartition state machine.

// world is a live state under construction.
type world struct {
	t    *testing.T
	live *Live
}

func newWorld(t *testing.T, streamOf *planner.Plan) *world {
	var cfg planner.StreamConfig
	b, _ := json.Marshal(streamOf.Stream)
	json.Unmarshal(b, &cfg)
	return &world{t: t, live: &Live{
		Stream:    &LiveStream{Config: cfg},
		Consumers: jsapi.Empty(),
	}}
}

// lanes adds every lane of p, as planned, with options applied to each.
func (w *world) lanes(p *planner.Plan, opts ...func(*jetstream.ConsumerInfo)) *world {
	for i := range p.Consumers {
		w.lane(p, i, opts...)
	}
	return w
}

func (w *world) lane(p *planner.Plan, i int, opts ...func(*jetstream.ConsumerInfo)) *jetstream.ConsumerInfo {
	var cfg jetstream.ConsumerConfig
	b, _ := json.Marshal(p.Consumers[i])
	if err := json.Unmarshal(b, &cfg); err != nil {
		w.t.Fatal(err)
	}
	cfg.Metadata["_nats.ver"] = "2.15.2" // what the server adds
	ci := &jetstream.ConsumerInfo{Name: cfg.Durable, Stream: p.Stream.Name, Config: cfg}
	for _, o := range opts {
		o(ci)
	}
	w.live.Consumers.Consumers = append(w.live.Consumers.Consumers, ci)
	return ci
}

func held(ci *jetstream.ConsumerInfo) {
	ci.Config.Metadata[planner.MetaHeld] = heldValue
	t := heldUntil
	ci.Config.PauseUntil = &t
}

func withBacklog(n uint64) func(*jetstream.ConsumerInfo) {
	return func(ci *jetstream.ConsumerInfo) { ci.NumPending = n }
}

func (w *world) transform(p *planner.Plan) *world {
	w.live.Stream.Config.SubjectTransform = p.Stream.SubjectTransform
	return w
}

func actions(d *Diff) map[Action]int { return d.Counts() }

func wantCounts(t *testing.T, d *Diff, want map[Action]int) {
	t.Helper()
	got := actions(d)
	for a, n := range want {
		if got[a] != n {
			t.Fatalf("%s: got %d, want %d (all: %v; refusals %v)", a, got[a], n, got, d.Refusals)
		}
	}
	total := 0
	for _, n := range want {
		total += n
	}
	if total != len(d.Lanes) {
		t.Fatalf("lanes %v, want exactly %v", got, want)
	}
}

func TestComputeFreshAndNoop(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4))
	d := Compute(p, &Live{Consumers: jsapi.Empty()}, Options{})
	wantCounts(t, d, map[Action]int{ActionCreate: 4})
	if d.Stream.Action != ActionCreate || !d.Pending() {
		t.Fatalf("stream %s", d.Stream.Action)
	}
	d = Compute(p, newWorld(t, p).lanes(p).live, Options{})
	wantCounts(t, d, map[Action]int{ActionUnchanged: 4})
	if d.Pending() || d.Stream.Action != ActionUnchanged {
		t.Fatalf("no-op diff pending: %+v %+v", d.Stream, d.Lanes[0].Changes)
	}
}

func TestComputeRepartitionStates(t *testing.T) {
	p4, p6, p8 := testutil.PlanDesign(t, testutil.Seed(4)), testutil.PlanDesign(t, testutil.Seed(6)), testutil.PlanDesign(t, testutil.Seed(8))

	t.Run("start", func(t *testing.T) {
		d := Compute(p6, newWorld(t, p4).lanes(p4).live, Options{})
		wantCounts(t, d, map[Action]int{ActionCreate: 4 + 2, ActionDrain: 4})
		if d.Repartition == nil || d.Repartition.Switched || d.Stream.SwitchMapping == nil || !d.Lanes[0].Held {
			t.Fatalf("%+v %+v", d.Repartition, d.Stream)
		}
	})
	t.Run("held lanes exist, not switched: continue", func(t *testing.T) {
		w := newWorld(t, p4).lanes(p4)
		w.lanes(p6, held)
		d := Compute(p6, w.live, Options{})
		wantCounts(t, d, map[Action]int{ActionUnchanged: 6, ActionDrain: 4})
		if d.Repartition.Switched || d.Stream.SwitchMapping == nil {
			t.Fatal("should switch next")
		}
	})
	t.Run("new lanes not held before the switch: hold them", func(t *testing.T) {
		w := newWorld(t, p4).lanes(p4)
		w.lanes(p6)
		wantCounts(t, Compute(p6, w.live, Options{}), map[Action]int{ActionHold: 6, ActionDrain: 4})
	})
	t.Run("switched: drain, then resume", func(t *testing.T) {
		w := newWorld(t, p4).transform(p6).lanes(p4)
		w.lanes(p6, held)
		d := Compute(p6, w.live, Options{})
		wantCounts(t, d, map[Action]int{ActionUnchanged: 6, ActionDrain: 4})
		if !d.Repartition.Switched || d.Stream.SwitchMapping != nil || !d.Lanes[0].Held {
			t.Fatalf("%+v", d.Repartition)
		}
	})
	t.Run("a third count is refused", func(t *testing.T) {
		w := newWorld(t, p4).lanes(p4)
		w.lanes(p6, held)
		d := Compute(p8, w.live, Options{})
		if !d.Refused() || !strings.Contains(d.Refusals[0], "already in progress") {
			t.Fatalf("refusals %v", d.Refusals)
		}
	})
	t.Run("going back after the switch is refused", func(t *testing.T) {
		w := newWorld(t, p4).transform(p6).lanes(p4)
		w.lanes(p6, held)
		d := Compute(p4, w.live, Options{})
		if !d.Refused() || !strings.Contains(d.Refusals[0], "finish it first") {
			t.Fatalf("refusals %v", d.Refusals)
		}
	})
	t.Run("going back before the switch drains the empty held lanes", func(t *testing.T) {
		w := newWorld(t, p4).transform(p4).lanes(p4)
		w.lanes(p6, held)
		d := Compute(p4, w.live, Options{})
		wantCounts(t, d, map[Action]int{ActionUnchanged: 4, ActionDrain: 6})
		if d.Refused() || !d.Repartition.Switched {
			t.Fatalf("%v %+v", d.Refusals, d.Repartition)
		}
	})
	t.Run("held lanes and no repartition: resume", func(t *testing.T) {
		w := newWorld(t, p6).transform(p6).lanes(p6, held)
		wantCounts(t, Compute(p6, w.live, Options{}), map[Action]int{ActionResume: 6})
	})
	t.Run("a hold recognised by its pause alone", func(t *testing.T) {
		w := newWorld(t, p6).transform(p6).lanes(p6, func(ci *jetstream.ConsumerInfo) {
			u := heldUntil
			ci.Config.PauseUntil = &u
		})
		wantCounts(t, Compute(p6, w.live, Options{}), map[Action]int{ActionResume: 6})
	})
	t.Run("an operator's pause is left alone", func(t *testing.T) {
		w := newWorld(t, p6).transform(p6).lanes(p6, func(ci *jetstream.ConsumerInfo) {
			u := heldUntil.AddDate(-50, 0, 0)
			ci.Config.PauseUntil = &u
		})
		wantCounts(t, Compute(p6, w.live, Options{}), map[Action]int{ActionUnchanged: 6})
	})
}

func TestComputeAccountRepartition(t *testing.T) {
	acct := func(d *planner.Design) { d.Mapping = planner.MappingAccount }
	p4, p6 := testutil.PlanDesign(t, testutil.Seed(4), acct), testutil.PlanDesign(t, testutil.Seed(6), acct)
	w := newWorld(t, p4).lanes(p4)
	d := Compute(p6, w.live, Options{})
	wantCounts(t, d, map[Action]int{ActionCreate: 6, ActionDrain: 4})
	if d.Repartition.Switched || d.Account == nil || d.Stream.Action != ActionUpdate {
		t.Fatalf("%+v %+v", d.Repartition, d.Stream)
	}
	if got := string(d.Stream.Changes[0].New); !strings.Contains(got, "n4.*.*") || !strings.Contains(got, "n6.*.*") {
		t.Fatalf("subjects %s", got)
	}
	w.lanes(p6, held)
	if d := Compute(p6, w.live, Options{MappingSwitched: true}); !d.Repartition.Switched {
		t.Fatal("--mapping-switched")
	}
	if d := Compute(p4, w.live, Options{}); !d.Refused() {
		t.Fatal("going back without --mapping-switched must be refused")
	}
}

func TestComputePrune(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(2))
	w := newWorld(t, p).transform(p).lanes(p)
	extra := w.lane(p, 0)
	extra.Name, extra.Config.Durable = "orders-spare", "orders-spare"
	wantCounts(t, Compute(p, w.live, Options{}), map[Action]int{ActionUnchanged: 2, ActionKeep: 1})
	wantCounts(t, Compute(p, w.live, Options{Prune: true}), map[Action]int{ActionUnchanged: 2, ActionDelete: 1})
	extra.NumPending = 3
	d := Compute(p, w.live, Options{Prune: true})
	if !d.Refused() || !strings.Contains(d.Refusals[0], "--force") {
		t.Fatalf("undrained prune: %v", d.Refusals)
	}
	wantCounts(t, Compute(p, w.live, Options{Prune: true, Force: true}), map[Action]int{ActionUnchanged: 2, ActionDelete: 1})
}

func TestComputeMatching(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(2))
	t.Run("a lane found by its tags keeps its name", func(t *testing.T) {
		w := newWorld(t, p).transform(p)
		w.lane(p, 0)
		ci := w.lane(p, 1)
		ci.Name, ci.Config.Durable = "custom-name", "custom-name"
		d := Compute(p, w.live, Options{})
		wantCounts(t, d, map[Action]int{ActionUnchanged: 2})
		if d.Lanes[1].Name != "custom-name" {
			t.Fatalf("%+v", d.Lanes[1])
		}
	})
	t.Run("a lane of another design under our name is refused", func(t *testing.T) {
		w := newWorld(t, p).transform(p)
		w.lane(p, 0)
		w.lane(p, 1, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata[planner.MetaDesign] = "payments" })
		d := Compute(p, w.live, Options{})
		if !d.Refused() || !strings.Contains(d.Refusals[0], `design "payments"`) {
			t.Fatalf("%v", d.Refusals)
		}
	})
	t.Run("an untagged consumer with a lane's name is adopted", func(t *testing.T) {
		w := newWorld(t, p).transform(p)
		w.lane(p, 0)
		w.lane(p, 1, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata = nil })
		d := Compute(p, w.live, Options{})
		if d.Lanes[1].Action != ActionUpdate || !strings.HasPrefix(d.Lanes[1].Changes[0].Field, "metadata.") {
			t.Fatalf("%+v", d.Lanes[1])
		}
	})
	t.Run("an unavailable lane is not created again", func(t *testing.T) {
		w := newWorld(t, p).transform(p)
		w.lane(p, 0)
		w.live.Consumers.Missing = []string{p.Consumers[1].Durable}
		wantCounts(t, Compute(p, w.live, Options{}), map[Action]int{ActionUnchanged: 1, ActionUnavailable: 1})
	})
}

func TestComputeChangesThatStrandMessages(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4))
	t.Run("same count, other mapping: refused unless --force", func(t *testing.T) {
		prefixed := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Prefix = "lanes" })
		w := newWorld(t, p).transform(p).lanes(p)
		d := Compute(prefixed, w.live, Options{})
		if !d.Refused() || !strings.Contains(strings.Join(d.Refusals, " "), "same 4 partitions") {
			t.Fatalf("%v", d.Refusals)
		}
		// Only the prefix changes: keys keep their partitions; what is at
		// stake is the messages stored under the old subjects.
		if r := strings.Join(d.Refusals, " "); strings.Contains(r, "keys would move") || !strings.Contains(r, "every key stays in its partition") {
			t.Fatalf("a prefix-only change explained as keys moving: %v", d.Refusals)
		}
	})
	t.Run("same count, other key tokens: keys move", func(t *testing.T) {
		two := func(keys ...int) func(d *planner.Design) {
			return func(d *planner.Design) { d.Subject = "devices.*.*"; d.KeyTokens = keys }
		}
		p1, p12 := testutil.PlanDesign(t, testutil.Seed(4), two(1)), testutil.PlanDesign(t, testutil.Seed(4), two(1, 2))
		d := Compute(p12, newWorld(t, p1).transform(p1).lanes(p1).live, Options{})
		if r := strings.Join(d.Refusals, " "); !strings.Contains(r, "keys would move") {
			t.Fatalf("a change of the partition function must say keys move: %v", d.Refusals)
		}
	})
	t.Run("filter change with a backlog: refused unless --force", func(t *testing.T) {
		prefixed := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Prefix = "lanes" })
		w := newWorld(t, p).transform(p).lanes(p, withBacklog(5))
		d := Compute(prefixed, w.live, Options{Force: true})
		if d.Refused() || d.Lanes[0].Action != ActionUpdate {
			t.Fatalf("--force: %v %+v", d.Refusals, d.Lanes[0])
		}
		d = Compute(prefixed, newWorld(t, p).lanes(p, withBacklog(5)).live, Options{})
		if !d.Refused() || !strings.Contains(strings.Join(d.Refusals, " "), "strand its 5") {
			t.Fatalf("%v", d.Refusals)
		}
	})
}

func TestComputeRecreateRecords(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(2))
	record := func(w *world, start string) {
		ph := w.lane(p, 0)
		ph.Name = placeholderName(p.Consumers[0].Durable)
		ph.Config.Metadata = map[string]string{planner.MetaRecreateLane: p.Consumers[0].Durable, planner.MetaRecreateDesign: "orders", planner.MetaRecreateStartSeq: start}
	}
	w := newWorld(t, p).transform(p)
	w.lane(p, 1)
	record(w, "42")
	d := Compute(p, w.live, Options{})
	if d.Lanes[0].Action != ActionFinish || d.Lanes[0].Position.StartSeq != 42 || d.OtherConsumers != 0 {
		t.Fatalf("%+v others=%d", d.Lanes[0], d.OtherConsumers)
	}
	w = newWorld(t, p).transform(p).lanes(p)
	record(w, "42")
	d = Compute(p, w.live, Options{})
	if d.Lanes[0].Action != ActionUnchanged || d.Lanes[0].placeholder == nil {
		t.Fatalf("a leftover record must be cleaned up: %+v", d.Lanes[0])
	}
}

// TestComputeGenerationStart: where new lanes start, from live state only.
func TestComputeGenerationStart(t *testing.T) {
	p4, p6 := testutil.PlanDesign(t, testutil.Seed(4)), testutil.PlanDesign(t, testutil.Seed(6))
	startOf := func(d *Diff) uint64 {
		for _, l := range d.Lanes {
			if l.Action == ActionCreate {
				return l.StartSeq
			}
		}
		t.Fatalf("no lane created: %+v", d.Counts())
		return 0
	}
	t.Run("fresh stream: the beginning", func(t *testing.T) {
		if s := startOf(Compute(p4, &Live{Consumers: jsapi.Empty()}, Options{})); s != 0 {
			t.Fatalf("start %d", s)
		}
	})
	t.Run("repartition, stream mapping: after the last sequence", func(t *testing.T) {
		w := newWorld(t, p4).transform(p4).lanes(p4)
		w.live.Stream.LastSeq = 500
		d := Compute(p6, w.live, Options{})
		if s := startOf(d); s != 501 {
			t.Fatalf("start %d", s)
		}
		if rec := d.Stream.edit.generations[planner.GenerationKey("orders", 6)]; rec.StartSeq != 501 || rec.Subjects != p6.Layout.Pattern() {
			t.Fatalf("the start must be recorded in the stream: %+v", d.Stream.edit)
		}
	})
	t.Run("return to a retired count, account mapping: after its retirement", func(t *testing.T) {
		a4 := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Mapping = planner.MappingAccount })
		a6 := testutil.PlanDesign(t, testutil.Seed(6), func(d *planner.Design) { d.Mapping = planner.MappingAccount })
		w := newWorld(t, a6).lanes(a6)
		w.live.Stream.LastSeq = 900
		w.live.Stream.Metadata = map[string]string{planner.GenerationKey("orders", 4): planner.GenerationRecord{Subjects: "x", RetiredSeq: 300, State: planner.GenerationRetired}.String()}
		if s := startOf(Compute(a4, w.live, Options{})); s != 301 {
			t.Fatalf("start %d, want 301 (messages a server mapped to n4 early are not skipped)", s)
		}
	})
	t.Run("a missing lane of a running generation: where its siblings start", func(t *testing.T) {
		w := newWorld(t, p4).transform(p4)
		for i := 1; i < 4; i++ {
			w.lane(p4, i, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata[planner.MetaStartSeq] = "77" })
		}
		w.live.Stream.LastSeq = 500
		// (Created only when told: its partition may hold messages it processed.)
		if s := startOf(Compute(p4, w.live, Options{MissingLaneStart: RestartAtStart})); s != 77 {
			t.Fatalf("start %d", s)
		}
	})
	t.Run("a missing lane nobody recorded: the beginning, never skipping work", func(t *testing.T) {
		w := newWorld(t, p4).transform(p4)
		w.lane(p4, 1)
		w.live.Stream.LastSeq = 500
		if s := startOf(Compute(p4, w.live, Options{MissingLaneStart: RestartAtStart})); s != 0 {
			t.Fatalf("start %d", s)
		}
	})
	t.Run("workqueue: deliver all", func(t *testing.T) {
		w := newWorld(t, p4).transform(p4).lanes(p4)
		w.live.Stream.Config.Retention = "workqueue"
		w.live.Stream.LastSeq = 500
		if s := startOf(Compute(p6, w.live, Options{})); s != 0 {
			t.Fatalf("start %d", s)
		}
	})
}

// TestGenerationRecordStates: a use during which nothing was published
// retires at its own start - 1; the record still says it is retired, and
// a new use makes it active again (found by the chaos test: sequences
// alone cannot tell).
func TestGenerationRecordStates(t *testing.T) {
	rec := planner.GenerationRecord{}.Merge(planner.GenerationRecord{Subjects: "a.n8.*.*", StartSeq: 101, State: planner.GenerationActive})
	if !rec.Current() || rec.Retired() {
		t.Fatalf("a new use: %+v", rec)
	}
	rec = rec.Merge(planner.GenerationRecord{RetiredSeq: 100, State: planner.GenerationRetired})
	if rec.Current() || !rec.Retired() || rec.StartSeq != 101 || rec.RetiredSeq != 100 {
		t.Fatalf("retired with nothing published: %+v", rec)
	}
	rec = rec.Merge(planner.GenerationRecord{StartSeq: 101, State: planner.GenerationActive}).Merge(planner.GenerationRecord{RetiredSeq: 90, State: planner.GenerationRetired})
	if !rec.Retired() || rec.RetiredSeq != 100 {
		t.Fatalf("the retirement only moves forward: %+v", rec)
	}
	back := planner.Generations(map[string]string{planner.GenerationKey("orders", 8): rec.String(), "other": "x", "lanes.generation.bad": "{"})
	if got := back["orders"][8]; got != rec {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestSubjectCovers(t *testing.T) {
	for _, c := range []struct {
		pattern, sub string
		want         bool
	}{
		{"a.*", "a.*", true}, {"a.>", "a.b.*", true}, {">", "a", true}, {"a.b", "a.*", false},
		{"a.*", "a.b.c", false}, {"a.*.c", "a.b.c", true}, {"a.*", "a.>", false}, {"a.>", "a", false},
	} {
		if got := subjectCovers(c.pattern, c.sub); got != c.want {
			t.Errorf("subjectCovers(%q, %q) = %v", c.pattern, c.sub, got)
		}
	}
}

// TestComputeDesignsSharingAStream: designs with the same mapping share a
// stream's transform; a design that would change it while another
// design's lanes use it is refused, naming them (--force switches it,
// to repartition the designs one after another); a design alone on its
// stream repartitions as before.
func TestComputeDesignsSharingAStream(t *testing.T) {
	named := func(name string, n int) *planner.Plan {
		return testutil.PlanDesign(t, testutil.Seed(n), func(d *planner.Design) { d.Name = name; d.Stream.Name = "ORDERS" })
	}
	orders8, audit8, billing4, orders16 := named("orders", 8), named("audit", 8), named("billing", 4), named("orders", 16)
	shared := func() *world { return newWorld(t, orders8).transform(orders8).lanes(orders8).lanes(audit8) }
	refusal := func(d *Diff) string { return strings.Join(d.Refusals, "\n") }

	t.Run("a second design with the same count shares the transform", func(t *testing.T) {
		d := Compute(audit8, newWorld(t, orders8).transform(orders8).lanes(orders8).live, Options{})
		wantCounts(t, d, map[Action]int{ActionCreate: 8})
		if d.Refused() || d.Stream.Action != ActionUnchanged || d.OtherConsumers != 8 {
			t.Fatalf("refusals %v, stream %+v", d.Refusals, d.Stream)
		}
	})
	t.Run("another count is refused, naming the designs on the transform", func(t *testing.T) {
		d := Compute(billing4, shared().live, Options{})
		r := refusal(d)
		for _, want := range []string{"feeds the lanes of designs audit, orders", "4 partitions", "separate stream", "mapping: account", "--force"} {
			if !strings.Contains(r, want) {
				t.Fatalf("%q not in the refusal:\n%s", want, r)
			}
		}
		if len(d.Refusals) != 1 || d.Stream.SwitchMapping != nil || d.Stream.edit != nil && d.Stream.edit.transform != nil {
			t.Fatalf("refusals %v, stream %+v", d.Refusals, d.Stream)
		}
		if d := Compute(billing4, shared().live, Options{Force: true}); d.Refused() || d.Stream.edit == nil || d.Stream.edit.transform == nil {
			t.Fatalf("--force: refusals %v, stream %+v", d.Refusals, d.Stream)
		}
	})
	t.Run("a repartition while another design uses the transform is refused", func(t *testing.T) {
		d := Compute(orders16, shared().live, Options{})
		if r := refusal(d); !strings.Contains(r, "feeds the lanes of design audit:") || strings.Contains(r, "orders,") {
			t.Fatalf("refusals %v", d.Refusals)
		}
		d = Compute(orders16, shared().live, Options{Force: true})
		if d.Refused() || d.Repartition == nil || d.Stream.SwitchMapping == nil {
			t.Fatalf("--force: refusals %v, repartition %+v", d.Refusals, d.Repartition)
		}
	})
	t.Run("a design alone on its stream repartitions as before", func(t *testing.T) {
		d := Compute(orders16, newWorld(t, orders8).transform(orders8).lanes(orders8).live, Options{})
		if d.Refused() || d.Repartition == nil || d.Stream.SwitchMapping == nil {
			t.Fatalf("refusals %v, repartition %+v", d.Refusals, d.Repartition)
		}
	})
	t.Run("a stream moved to another count: the refusal says so, not 'the same partitions'", func(t *testing.T) {
		w := newWorld(t, orders8).transform(billing4).lanes(orders8).lanes(billing4)
		d := Compute(orders8, w.live, Options{})
		if r := refusal(d); len(d.Refusals) != 1 || !strings.Contains(r, "feeds the lanes of design billing") || strings.Contains(r, "same 8 partitions") {
			t.Fatalf("refusals %v", d.Refusals)
		}
		// Nobody uses the 4 partitions (billing's lanes were deleted).
		d = Compute(orders8, newWorld(t, orders8).transform(billing4).lanes(orders8).live, Options{})
		r := refusal(d)
		if !d.Refused() || strings.Contains(r, "same 8 partitions") || !strings.Contains(r, "the stream maps to 4 partitions") {
			t.Fatalf("refusals %v", d.Refusals)
		}
	})
}

// TestComputeMissingLane: a lane missing from a generation that runs
// (deleted by hand) is not created again at the generation's start when
// its partition holds messages, unless told where it restarts (issue
// 15.11); a design applied for the first time keeps creating its lanes.
func TestComputeMissingLane(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(8))
	const gone = 3
	filter := p.Consumers[gone].FilterSubject
	// running is the generation with lane 3 deleted; stored counts are
	// what Compare reads for it.
	running := func(stored map[StoredKey]jsapi.Stored, opts ...func(*jetstream.ConsumerInfo)) *world {
		w := newWorld(t, p).transform(p)
		for i := range p.Consumers {
			if i != gone {
				w.lane(p, i, opts...)
			}
		}
		w.live.Stream.LastSeq = 500
		w.live.Stored = stored
		return w
	}
	counted := map[StoredKey]jsapi.Stored{{filter, 1}: {First: 12, Count: 40, Counted: true}}
	missing := func(t *testing.T, d *Diff) LaneChange {
		t.Helper()
		l := d.Lanes[gone]
		if l.Missing == nil || l.Missing.Filter != filter {
			t.Fatalf("lane %s not seen as missing: %+v", l.Name, l)
		}
		for i, other := range d.Lanes {
			if i != gone && (other.Action != ActionUnchanged || other.Missing != nil) {
				t.Fatalf("lane %s: %+v", other.Name, other)
			}
		}
		return l
	}
	refused := func(t *testing.T, d *Diff, want ...string) {
		t.Helper()
		l := missing(t, d)
		all := strings.Join(d.Refusals, "\n")
		if l.Action != ActionRefused || len(d.Refusals) != 1 || l.Missing.Start != "" {
			t.Fatalf("want the lane refused: %+v %+v, refusals %v", l, l.Missing, d.Refusals)
		}
		for _, w := range append(want, l.Name, "--missing-lane-start") {
			if !strings.Contains(all, w) {
				t.Fatalf("refusal without %q:\n%s", w, all)
			}
		}
	}

	t.Run("first apply: created at the start, not missing", func(t *testing.T) {
		d := Compute(p, &Live{Consumers: jsapi.Empty()}, Options{})
		w := newWorld(t, p) // a stream made beforehand, no lane yet
		w.live.Stream.LastSeq = 500
		for _, d := range []*Diff{d, Compute(p, w.live, Options{})} {
			wantCounts(t, d, map[Action]int{ActionCreate: 8})
			if len(d.missing()) > 0 || d.Refused() {
				t.Fatalf("a first apply is not a missing lane: %v", d.Refusals)
			}
		}
	})
	t.Run("refused by default, saying what would be delivered again", func(t *testing.T) {
		d := Compute(p, running(counted).live, Options{})
		refused(t, d, "the 40 messages stored on its partition from stream seq 12", "deleted by hand")
		if m := d.Lanes[gone].Missing; m.Stored != 40 || !m.Counted || m.FirstSeq != 12 || m.From != 1 {
			t.Fatalf("%+v", m)
		}
	})
	t.Run("not read (Compute alone): refused, not counted", func(t *testing.T) {
		refused(t, Compute(p, running(nil).live, Options{}), "not counted")
	})
	t.Run("not countable (no direct gets): refused, from the first stored", func(t *testing.T) {
		w := running(map[StoredKey]jsapi.Stored{{filter, 1}: {First: 12}})
		refused(t, Compute(p, w.live, Options{}), "from stream seq 12", "cannot count them")
	})
	t.Run("nothing stored: created at the start", func(t *testing.T) {
		d := Compute(p, running(map[StoredKey]jsapi.Stored{{filter, 1}: {Counted: true}}).live, Options{})
		if l := missing(t, d); l.Action != ActionCreate || l.StartSeq != 0 || d.Refused() || !strings.Contains(l.Reason, "nothing is stored") {
			t.Fatalf("%+v %v", l, d.Refusals)
		}
	})
	t.Run("start: every stored message again", func(t *testing.T) {
		d := Compute(p, running(counted).live, Options{MissingLaneStart: RestartAtStart})
		l := missing(t, d)
		if m := l.Missing; l.Action != ActionCreate || d.Refused() || m.Start != RestartAtStart || m.RestartSeq != 1 || m.Delivered != 40 || m.Skipped != 0 {
			t.Fatalf("%+v %+v", l, m)
		}
	})
	t.Run("now: after the stream's last message", func(t *testing.T) {
		d := Compute(p, running(counted).live, Options{MissingLaneStart: RestartNow})
		l := missing(t, d)
		if m := l.Missing; l.Action != ActionCreate || m.Start != RestartNow || m.RestartSeq != 501 || m.Delivered != 0 || m.Skipped != 40 ||
			!strings.Contains(l.Reason, "skips the 40 messages") {
			t.Fatalf("%+v %+v", l, m)
		}
	})
	t.Run("recorded: refused without a recorded position", func(t *testing.T) {
		w := running(counted)
		refused(t, Compute(p, w.live, Options{MissingLaneStart: RestartRecorded}), "lanes work has recorded no position", "no record of the lane")
		w.live.LaneRecords = map[string]LaneRecord{p.Consumers[gone].Durable: {Instance: "a"}}
		refused(t, Compute(p, w.live, Options{MissingLaneStart: RestartRecorded}), "says which instance served it", "instance a")
		w.live.LaneRecords, w.live.LaneRecordsErr = nil, "permissions violation"
		refused(t, Compute(p, w.live, Options{MissingLaneStart: RestartRecorded}), "could not be read: permissions violation")
	})
	t.Run("recorded: after the recorded position", func(t *testing.T) {
		stored := map[StoredKey]jsapi.Stored{{filter, 1}: {First: 12, Count: 40, Counted: true}, {filter, 301}: {First: 305, Count: 15, Counted: true}}
		w := running(stored)
		w.live.LaneRecords = map[string]LaneRecord{p.Consumers[gone].Durable: {Instance: "a", Processed: 300}}
		d := Compute(p, w.live, Options{MissingLaneStart: RestartRecorded})
		l := missing(t, d)
		if m := l.Missing; l.Action != ActionCreate || m.Start != RestartRecorded || m.RestartSeq != 301 || m.Delivered != 15 || m.Skipped != 25 || !m.Counted {
			t.Fatalf("%+v %+v", l, m)
		}
	})
	t.Run("a generation started later: counted from its start, never restarted before it", func(t *testing.T) {
		at77 := func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata[planner.MetaStartSeq] = "77" }
		w := running(map[StoredKey]jsapi.Stored{{filter, 77}: {First: 80, Count: 9, Counted: true}}, at77)
		w.live.LaneRecords = map[string]LaneRecord{p.Consumers[gone].Durable: {Processed: 10}} // before the start: an earlier use
		d := Compute(p, w.live, Options{MissingLaneStart: RestartRecorded})
		l := missing(t, d)
		if m := l.Missing; l.StartSeq != 77 || m.From != 77 || m.RestartSeq != 77 || m.Delivered != 9 || m.Skipped != 0 {
			t.Fatalf("%+v %+v", l, m)
		}
	})
	t.Run("every lane deleted, the running use recorded", func(t *testing.T) {
		w := newWorld(t, p).transform(p)
		w.live.Stream.LastSeq = 500
		w.live.Stream.Metadata = map[string]string{planner.GenerationKey("orders", 8): planner.GenerationRecord{Subjects: "x", StartSeq: 40, State: planner.GenerationActive}.String()}
		d := Compute(p, w.live, Options{})
		if len(d.missing()) != 8 || !d.Refused() {
			t.Fatalf("missing %d, refusals %v", len(d.missing()), d.Refusals)
		}
		w.live.Stream.Metadata = map[string]string{planner.GenerationKey("orders", 8): planner.GenerationRecord{Subjects: "x", StartSeq: 40, RetiredSeq: 90, State: planner.GenerationRetired}.String()}
		if d := Compute(p, w.live, Options{}); len(d.missing()) != 0 || d.Refused() {
			t.Fatalf("a retired generation's return is a new use: %v", d.Refusals)
		}
	})
	t.Run("lanes made by hand (untagged): the generation runs too", func(t *testing.T) {
		d := Compute(p, running(counted, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata = nil }).live, Options{})
		if l := d.Lanes[gone]; l.Action != ActionRefused || l.Missing == nil {
			t.Fatalf("%+v %v", l, d.Refusals)
		}
	})
	t.Run("workqueue: acked messages are gone, nothing to deliver again", func(t *testing.T) {
		w := running(nil)
		w.live.Stream.Config.Retention = "workqueue"
		d := Compute(p, w.live, Options{})
		if l := d.Lanes[gone]; l.Action != ActionCreate || l.Missing != nil || d.Refused() {
			t.Fatalf("%+v %v", l, d.Refusals)
		}
	})
	t.Run("a repartition's held new lanes are not missing lanes", func(t *testing.T) {
		p4 := testutil.PlanDesign(t, testutil.Seed(4))
		w := newWorld(t, p4).transform(p4).lanes(p4)
		for i := range p.Consumers {
			if i != gone {
				w.lane(p, i, held)
			}
		}
		d := Compute(p, w.live, Options{})
		if l := d.Lanes[gone]; l.Action != ActionCreate || !l.Held || l.Missing != nil || d.Refused() {
			t.Fatalf("%+v %v", l, d.Refusals)
		}
	})
}
