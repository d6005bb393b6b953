package live

import (
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// The sandbox re-plans the design under its own subjects and stream, in
// stream mode, without changing the caller's plan.
func TestSandboxIsolatesTheDesign(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) {
		d.Mapping = planner.MappingAccount
		d.Stream.Replicas = 3
		d.SetOrigin("name", "lanes.yaml:1")
	})
	box, err := newSandbox(p, "ab12cd34", "lanes", 2*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	sp := box.plan
	if box.stream != "LANES_SIM_AB12CD34_LANES" || sp.Stream.Name != box.stream {
		t.Errorf("stream %q / %q", box.stream, sp.Stream.Name)
	}
	if box.prefix != "lanes_sim.ab12cd34.lanes" || sp.Stream.Subjects[0] != "lanes_sim.ab12cd34.lanes.msgs.received_from.*" {
		t.Errorf("prefix %q, subjects %v", box.prefix, sp.Stream.Subjects)
	}
	if sp.Stream.SubjectTransform == nil || !strings.HasPrefix(sp.Stream.SubjectTransform.Destination, box.prefix+".") {
		t.Errorf("the mapping must live in the sandbox stream: %+v", sp.Stream.SubjectTransform)
	}
	if sp.Stream.Replicas != 1 || sp.Consumers[0].AckWait != 2*time.Second {
		t.Errorf("replicas %d, ack wait %s", sp.Stream.Replicas, sp.Consumers[0].AckWait)
	}
	for i, c := range sp.Consumers {
		if !strings.HasPrefix(c.FilterSubject, box.prefix+".") || c.Durable != p.Consumers[i].Durable {
			t.Errorf("lane %d: %s filters %s", i, c.Durable, c.FilterSubject)
		}
	}
	// The same key lands in the same lane inside the sandbox.
	for _, key := range []string{"alice", "bob", "carol", "dave"} {
		subj, _ := p.SubjectForKey(key)
		out, _ := p.LaneOf(subj)
		in, _ := sp.LaneOf(box.prefix + "." + subj)
		if out.Partition != in.Partition {
			t.Errorf("%s: lane %d outside, %d inside", key, out.Partition, in.Partition)
		}
	}
	if p.Design.Mapping != planner.MappingAccount || p.Design.Origin["lane.ack_wait"] != "" || p.Stream.Replicas != 3 {
		t.Errorf("the caller's plan changed: %+v", p.Design)
	}
}

func TestSandboxKeepsAdoptedLayouts(t *testing.T) {
	prefixed := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Prefix = "lanes.orders" })
	box, err := newSandbox(prefixed, "x", "lanes", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if f := box.plan.Consumers[0].FilterSubject; !strings.HasPrefix(f, "lanes_sim.x.lanes.lanes.orders.") {
		t.Errorf("prefix design filter %q", f)
	}
	adopted := testutil.PlanDesign(t, testutil.Seed(0), func(d *planner.Design) {
		d.Destination = "parts.{{partition(3,1)}}.{{wildcard(1)}}"
	})
	box, err = newSandbox(adopted, "x", "lanes", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(box.plan.Consumers) != 3 || box.plan.Consumers[2].FilterSubject != "lanes_sim.x.lanes.parts.2.*" {
		t.Errorf("adopted destination: %+v", box.plan.Consumers)
	}
}

// Shared strategies get one consumer over everything, sized for every
// worker; lanes get the plan's consumers.
func TestStrategyConsumers(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Lane.Pinned = true })
	box, err := newSandbox(p, "x", "single", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strategy   strategy.Strategy
		consumers  int
		ackPending int
		workers    int
		group      string
	}{
		{strategy.Single, 1, 1, 8, ""},
		{strategy.Unordered, 1, 8, 8, ""},
		{strategy.Versioned, 1, 8, 8, ""},
		{strategy.Lanes, 4, 1, 2, planner.PinnedGroup},
	} {
		defs, lanes := box.consumers(tc.strategy, strategy.Params{Partitions: 4, WorkersPerLane: 2, MaxAckPending: 1, Pinned: true})
		if len(defs) != tc.consumers || len(lanes) != tc.consumers {
			t.Errorf("%s: %d consumers", tc.strategy.Name, len(defs))
			continue
		}
		d, l := defs[0], lanes[0]
		if d.MaxAckPending != tc.ackPending || l.workers != tc.workers || l.group != tc.group || d.MaxWaiting < l.workers {
			t.Errorf("%s: max ack pending %d, workers %d, group %q, max waiting %d", tc.strategy.Name, d.MaxAckPending, l.workers, l.group, d.MaxWaiting)
		}
		if tc.strategy.Name != "lanes" && (d.FilterSubject != "" || len(d.PriorityGroups) != 0 || d.Metadata[planner.MetaDesign] != "") {
			t.Errorf("%s: a shared consumer is no lane: %+v", tc.strategy.Name, d)
		}
	}
}

// Every registered strategy can run live.
func TestEveryRegisteredStrategyRunsLive(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(2))
	w := newWorkload(t, p, spec{keys: "uniform:4", messages: 4, process: time.Millisecond})
	o := Options{Plan: p, Workload: w, Strategies: strategy.All, Lease: strategy.LeaseSettings{TTL: time.Second, Retry: time.Millisecond}}
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
}

// A key-parallel design's lanes are the planner's, in the sandbox too:
// max ack pending K, the pinned group, and the lanes.keys_in_flight
// metadata lanes work reads; the live run accepts it for lanes work, and
// still refuses a plain max ack pending above 1.
func TestKeyParallelLanesCarryThePlan(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Lane.KeysInFlight = 16 })
	box, err := newSandbox(p, "x", "lanes", time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Plan: p, WorkersPerLane: 2}
	defs, lanes := box.consumers(strategy.Lanes, o.params())
	if len(defs) != 4 {
		t.Fatalf("%d lanes", len(defs))
	}
	for i, d := range defs {
		if d.MaxAckPending != 16 || d.PriorityPolicy != "pinned_client" || len(d.PriorityGroups) != 1 || lanes[i].group != planner.PinnedGroup ||
			d.Metadata[planner.MetaKeysInFlight] != "16" || d.AckWait != time.Second || !strings.Contains(d.Description, "key-parallel") {
			t.Errorf("lane %d: %+v, group %q", i, d, lanes[i].group)
		}
		if tag, ok := planner.TagOf(d.Metadata); !ok || tag.KeysInFlight != 16 || tag.Partition != i {
			t.Errorf("lane %d tag %+v %v", i, tag, ok)
		}
	}
	w := newWorkload(t, p, spec{keys: "uniform:4", messages: 4, process: time.Millisecond})
	o = Options{Plan: p, Workload: w, Strategies: []strategy.Strategy{strategy.Lanes}, WorkersPerLane: 2}
	if err := o.Check(); err != nil {
		t.Errorf("a key-parallel design refused: %v", err)
	}
	plain := testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Lane.MaxAckPending = 16 })
	o.Plan = plain
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "key-parallel lanes (--keys-in-flight K") {
		t.Errorf("max ack pending 16 without keys in flight: %v", err)
	}
}
