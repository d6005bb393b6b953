package actions

import (
	"errors"
	"slices"
	"testing"

	"github.com/lanes-dev/lanes/health"
)

// During a repartition a design has two generations: the default target
// is the current one (what new messages go to), partition numbers name
// its lanes, lane names reach the old ones, and a key finds its lane in
// both.
func TestPickDuringARepartition(t *testing.T) {
	r := &health.Report{Stream: "ORDERS", Layouts: []health.Layout{
		{Source: "orders.*", Destination: "orders.n2.{{partition(2,1)}}.{{wildcard(1)}}", Partitions: 2},
		{Source: "orders.*", Destination: "orders.n4.{{partition(4,1)}}.{{wildcard(1)}}", Partitions: 4, Current: true},
	}}
	for p := range 2 {
		r.Lanes = append(r.Lanes, health.Lane{Name: "o-n2-0" + string(rune('0'+p)), Design: "o", Partition: p, Partitions: 2, Filter: "orders.n2." + string(rune('0'+p)) + ".*"})
	}
	for p := range 4 {
		r.Lanes = append(r.Lanes, health.Lane{Name: "o-n4-0" + string(rune('0'+p)), Design: "o", Partition: p, Partitions: 4, Filter: "orders.n4." + string(rune('0'+p)) + ".*"})
	}
	r.Lanes = append(r.Lanes, health.Lane{Name: "x-n4-00", Design: "x", Partition: 0, Partitions: 4})
	names := func(tg Target) []string {
		t.Helper()
		sel, err := pick(r, tg)
		if err != nil {
			t.Fatalf("%+v: %v", tg, err)
		}
		return sel.Names()
	}
	if got := names(Target{Stream: "ORDERS", Design: "o"}); !slices.Equal(got, []string{"o-n4-00", "o-n4-01", "o-n4-02", "o-n4-03"}) {
		t.Errorf("default: %v, want the current generation", got)
	}
	if got := names(Target{Stream: "ORDERS", Design: "o", Lanes: []string{"3", "o-n2-01", "3"}}); !slices.Equal(got, []string{"o-n2-01", "o-n4-03"}) {
		t.Errorf("by partition and name: %v", got)
	}
	if got := names(Target{Stream: "ORDERS", Design: "o", Keys: []string{"alice"}}); len(got) != 2 || got[0][:4] != "o-n2" || got[1][:4] != "o-n4" {
		t.Errorf("a key during a repartition: %v, want its old and its new lane", got)
	}
	var ie *InputError
	for _, tg := range []Target{
		{Stream: "ORDERS", Design: "o", Lanes: []string{"x-n4-00"}}, // another design's lane
		{Stream: "ORDERS", Design: "o", Lanes: []string{"4"}},
		{Stream: "ORDERS", Design: "none"},
		{Stream: "ORDERS", Design: "o", Keys: []string{"a.b.c"}},
	} {
		if _, err := pick(r, tg); !errors.As(err, &ie) {
			t.Errorf("%+v: %v, want an input error", tg, err)
		}
	}
}
