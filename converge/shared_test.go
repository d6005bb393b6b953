package converge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestSharedStreamRepartitionedOneAfterAnother: two designs share a
// stream (same mapping; each gets every message). A repartition of one
// is refused while the other's lanes read the transform; with --force it
// switches the transform, and the other design, applied with the same new
// count, finds the mapping switched, drains its old lanes and resumes its
// new ones. Under a publisher, each design processes every message once,
// in per-key order.
func TestSharedStreamRepartitionedOneAfterAnother(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	shared := func(name string, n int) *planner.Plan {
		d := testutil.Seed(n)
		d.Name, d.Stream.Name = name, "ORDERS"
		return testutil.PlanDesign(t, d)
	}
	apply(t, c, shared("orders", 4), converge.Options{})
	apply(t, c, shared("audit", 4), converge.Options{})

	orders := newOrderCheck(t, js, "ORDERS", "orders", 20) // publishes and checks orders' lanes
	audit := newOrderCheck(t, js, "ORDERS", "audit", 20)   // checks audit's lanes: the same messages
	orders.publish(200)
	orders.watchLanes()
	audit.watchLanes()
	stop := orders.publishInBackground()

	_, _, err := converge.Apply(context.Background(), c, shared("orders", 6), converge.Options{DrainTimeout: time.Minute})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(strings.Join(refused.Reasons, " "), "feeds the lanes of design audit") {
		t.Fatalf("a repartition of one design sharing the stream: %v", err)
	}
	if _, res := apply(t, c, shared("orders", 6), converge.Options{Force: true, DrainTimeout: time.Minute}); !res.MappingSwitched || res.Resumed != 6 || res.Deleted != 4 {
		t.Fatalf("orders 4 -> 6 with --force: %+v", res)
	}
	d, res := apply(t, c, shared("audit", 6), converge.Options{DrainTimeout: time.Minute})
	if d.Refused() || d.Repartition == nil || !d.Repartition.Switched || res.Created != 6 || res.Resumed != 6 || res.Deleted != 4 {
		t.Fatalf("audit 4 -> 6 after the switch: refusals %v, repartition %+v, result %+v", d.Refusals, d.Repartition, res)
	}
	stop()

	orders.waitAllProcessed(30 * time.Second)
	orders.assertInOrder()
	published := orders.Counts().Published
	deadline := time.Now().Add(30 * time.Second)
	for audit.Counts().Processed < published && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := audit.Counts(); n.Processed != published || n.Repeated > 0 || audit.Err() != nil {
		t.Fatalf("audit processed %d of %d messages (%d repeated): %v", n.Processed, published, n.Repeated, audit.Err())
	}
}
