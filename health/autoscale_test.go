package health_test

import (
	"reflect"
	"testing"

	"github.com/lanes-dev/lanes/health"
)

// TestInstancesWanted: one instance per busy lane, at least one while a
// design has lanes, never more than its lanes.
func TestInstancesWanted(t *testing.T) {
	for _, c := range []struct{ lanes, busy, want int }{
		{0, 0, 0}, {8, 0, 1}, {8, 1, 1}, {8, 3, 3}, {8, 8, 8}, {2, 5, 2},
	} {
		if got := health.InstancesWanted(c.lanes, c.busy); got != c.want {
			t.Errorf("InstancesWanted(%d lanes, %d busy) = %d, want %d", c.lanes, c.busy, got, c.want)
		}
	}
}

// TestReportWanted: per design, a lane is busy when it answered with a
// backlog and is not paused (a repartition's held lanes wait for apply,
// not for instances); a lane that did not answer counts among the lanes
// only; consumers lanes did not tag count nowhere; a design with workers
// but no lanes wants none.
func TestReportWanted(t *testing.T) {
	lane := func(design string, backlog uint64, edit ...func(*health.Lane)) health.Lane {
		l := health.Lane{Design: design, Tagged: true, State: health.StateOK, Backlog: backlog}
		for _, e := range edit {
			e(&l)
		}
		return l
	}
	r := &health.Report{
		Lanes: []health.Lane{
			lane("orders", 0), lane("orders", 5), lane("orders", 1),
			lane("orders", 9, func(l *health.Lane) { l.Paused = true }),
			lane("orders", 0, func(l *health.Lane) { l.State = health.StateMissing }),
			lane("audit", 0), lane("audit", 0),
			lane("", 40, func(l *health.Lane) { l.Tagged = false }),
		},
		Workers: []health.Workers{{Design: "orders"}, {Design: "retired"}},
	}
	want := []health.Wanted{
		{Design: "audit", Lanes: 2, Busy: 0, Instances: 1},
		{Design: "orders", Lanes: 5, Busy: 2, Instances: 2},
		{Design: "retired", Lanes: 0, Busy: 0, Instances: 0},
	}
	if got := r.Wanted(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Wanted() = %+v\nwant %+v", got, want)
	}
}
