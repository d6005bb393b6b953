package strategy

import (
	"testing"

	"github.com/lanes-dev/lanes/sim/judge"
)

// Every strategy gets the same workers, shaped its own way.
func TestShapes(t *testing.T) {
	p := Params{Partitions: 4, WorkersPerLane: 2, MaxAckPending: 1, Pinned: true}
	for _, tc := range []struct {
		s    Strategy
		want Shape
	}{
		{Single, Shape{Consumers: 1, WorkersEach: 8, MaxAckPending: 1}},
		{Lanes, Shape{Consumers: 4, WorkersEach: 2, MaxAckPending: 1, Pinned: true, ByPartition: true}},
		{Unordered, Shape{Consumers: 1, WorkersEach: 8, MaxAckPending: 8}},
		{Versioned, Shape{Consumers: 1, WorkersEach: 8, MaxAckPending: 8}},
	} {
		got := tc.s.Shape(p)
		if got != tc.want {
			t.Errorf("%s: shape %+v, want %+v", tc.s.Name, got, tc.want)
		}
		if got.Consumers*got.WorkersEach != p.Workers() {
			t.Errorf("%s: %d workers, want %d like every strategy", tc.s.Name, got.Consumers*got.WorkersEach, p.Workers())
		}
	}
	unpinned := Lanes.Shape(Params{Partitions: 2, WorkersPerLane: 1, MaxAckPending: 3})
	if unpinned.Pinned || unpinned.MaxAckPending != 3 {
		t.Errorf("lanes follow the design: %+v", unpinned)
	}
}

// keys_in_flight K above 1 makes the lanes key-parallel: max ack pending
// K, pinned, the shared strategies ignore it, and
// K=1 is the serial lane.
func TestKeyParallelShape(t *testing.T) {
	p := Params{Partitions: 4, WorkersPerLane: 2, MaxAckPending: 32, Pinned: true, KeysInFlight: 32}
	want := Shape{Consumers: 4, WorkersEach: 2, MaxAckPending: 32, Pinned: true, ByPartition: true, KeysInFlight: 32}
	if got := Lanes.Shape(p); got != want || !got.KeyParallel() {
		t.Errorf("lanes, K=32: %+v, want %+v", got, want)
	}
	for _, s := range []Strategy{Single, Unordered, Versioned, KVLease} {
		if got := s.Shape(p); got.KeyParallel() || got.KeysInFlight != 0 {
			t.Errorf("%s follows keys in flight: %+v", s.Name, got)
		}
	}
	p.KeysInFlight, p.MaxAckPending, p.Pinned = 1, 1, false
	if got := Lanes.Shape(p); got.KeyParallel() || got.KeysInFlight != 0 {
		t.Errorf("lanes, K=1: %+v", got)
	}
}

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	baselines := 0
	for _, s := range All {
		if s.Name == "" || s.Summary == "" || s.Model == "" || s.Live == "" {
			t.Errorf("%+v: a strategy needs a name, a summary and both mechanics", s)
		}
		if seen[s.Name] {
			t.Errorf("%s registered twice", s.Name)
		}
		seen[s.Name] = true
		if s.Baseline {
			baselines++
		}
		if got, ok := Lookup(s.Name); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%q) = %v, %v", s.Name, got.Name, ok)
		}
	}
	if baselines != 1 {
		t.Errorf("%d baselines, want one", baselines)
	}
	if s, ok := Lookup("LANES"); !ok || s.Name != "lanes" {
		t.Error("lookup is case-insensitive")
	}
	if _, ok := Lookup("fast"); ok {
		t.Error("unknown name found")
	}
	if len(Defaults()) == 0 || len(Names()) != len(All) {
		t.Errorf("defaults %v, names %v", NamesOf(Defaults()), Names())
	}
	if Versioned.Store != judge.Versioned || Unordered.Store != judge.Plain {
		t.Error("stores")
	}
}

func TestLanesNoteCountsUsedLanes(t *testing.T) {
	r := judge.Result{Lanes: []judge.LaneResult{{Messages: 3}, {Messages: 0}, {Messages: 1}}}
	if got := Lanes.Notes(r); len(got) != 1 || got[0] != "only 2 of 3 lanes carry keys (a key never spreads over lanes)" {
		t.Errorf("notes %q", got)
	}
	r.Lanes[1].Messages = 1
	if got := Lanes.Notes(r); len(got) != 0 {
		t.Errorf("every lane used: notes %q", got)
	}
}
