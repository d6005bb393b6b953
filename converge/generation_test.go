package converge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestReturnToEarlierCountDoesNotReplay goes 4 -> 6 -> 4 -> 3 -> 4 on a
// limits-retention stream, with workers checking per-key order, in both
// mapping modes. Every subject of a generation keeps the messages its
// earlier lanes processed; a new lane of that generation must start after
// them: nothing is delivered twice, nothing is skipped.
func TestReturnToEarlierCountDoesNotReplay(t *testing.T) {
	t.Parallel()
	for _, mapping := range []string{planner.MappingStream, planner.MappingAccount} {
		t.Run(mapping, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			c := open(t, srv.URL())
			_, js := natstest.Connect(t, srv.URL())
			var oc *orderCheck
			for i, n := range []int{4, 6, 4, 3, 4} {
				d := testutil.Seed(n)
				d.Mapping = mapping
				p := testutil.PlanDesign(t, d)
				if i == 0 {
					if mapping == planner.MappingAccount {
						if err := srv.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
							t.Fatal(err)
						}
					}
					apply(t, c, p, converge.Options{})
					oc = newOrderCheck(t, js, p.Stream.Name, "orders", 25)
					oc.watchLanes()
				} else {
					repartition(t, srv, p)
				}
				oc.publish(150)
				oc.waitAllProcessed(30 * time.Second)
				oc.assertInOrder()
			}
			if d, _ := apply(t, c, testutil.PlanDesign(t, func() planner.Design { d := testutil.Seed(4); d.Mapping = mapping; return d }()), converge.Options{}); d.Pending() {
				t.Fatalf("after the round trip apply still has work: %+v", d.Counts())
			}
		})
	}
}

// repartition drives a repartition to p to its end: in account mode, the
// first run, the operator's mapping switch, and the run with
// --mapping-switched.
func repartition(t *testing.T, srv *natstest.Server, p *planner.Plan) {
	t.Helper()
	conn := open(t, srv.URL())
	if p.Design.Mapping == planner.MappingAccount {
		_, _, err := converge.Apply(context.Background(), conn, p, converge.Options{})
		var inc *converge.IncompleteError
		if !errors.As(err, &inc) {
			t.Fatalf("account repartition, first run: want incomplete, got %v", err)
		}
		if err := srv.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
			t.Fatal(err)
		}
		apply(t, conn, p, converge.Options{MappingSwitched: true, DrainTimeout: time.Minute})
		return
	}
	_, res := apply(t, conn, p, converge.Options{DrainTimeout: time.Minute})
	if res.Drain == nil || !res.Drain.Drained {
		t.Fatalf("repartition to %d did not drain: %+v", p.Design.Partitions, res)
	}
}
