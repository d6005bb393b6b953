package membership_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/membership"
)

// TestSnapshotAndTakeKnown: Snapshot reads every lane record of a scope
// at once, and TakeKnown takes a lane from it with one write; a record
// changed since the snapshot (or written since, where there was none)
// makes that write fail, and a lane held by the snapshot is read again:
// the take decides on the record as it is (a lane held by a live member
// stays its, one released since is taken).
func TestSnapshotAndTakeKnown(t *testing.T) {
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := membership.Open(ctx, js, "lanes_records_test", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := membership.Records{JS: js, KV: kv, Scope: "ORDERS.orders"}
	members := map[string]string{"a": "ea", "b": "eb"}
	a := membership.LaneServer{Instance: "a", Epoch: "ea", Since: time.Now()}
	b := membership.LaneServer{Instance: "b", Epoch: "eb", Since: time.Now()}

	for _, lane := range []string{"l0", "l1"} {
		if c, holder, err := r.Take(ctx, lane, a, members); c == nil || err != nil {
			t.Fatalf("a takes %s: holder %q, %v", lane, holder, err)
		}
	}
	snap, err := r.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 2 || snap["l0"] == nil || snap["l1"] == nil {
		t.Fatalf("snapshot has %d records, want l0 and l1: %v", len(snap), snap)
	}

	// From the snapshot: l0 is a's, a live member's.
	if c, holder, err := r.TakeKnown(ctx, "l0", snap["l0"], b, members); c != nil || err != nil || holder != "a" {
		t.Fatalf("b takes a's l0 from the snapshot: claim %v, holder %q, %v; want refused, held by a", c, holder, err)
	}
	// l1 is released after the snapshot: the stale read's write fails,
	// and the take reads the record again and takes it.
	c, _, err := r.Take(ctx, "l1", a, map[string]string{}) // a again, to get its claim
	if err != nil || c == nil {
		t.Fatalf("a takes l1 again: %v", err)
	}
	if err := r.Update(ctx, c, func(rec *membership.LaneServer) { rec.Released = true }); err != nil {
		t.Fatal(err)
	}
	if c, holder, err := r.TakeKnown(ctx, "l1", snap["l1"], b, members); c == nil || err != nil {
		t.Fatalf("b takes the released l1 from a stale snapshot: holder %q, %v", holder, err)
	}
	// No record in the snapshot, but one written since: the create fails,
	// and the take finds b holds it.
	if c, _, err := r.Take(ctx, "l2", b, members); c == nil || err != nil {
		t.Fatalf("b takes l2: %v", err)
	}
	if c, holder, err := r.TakeKnown(ctx, "l2", nil, a, members); c != nil || err != nil || holder != "b" {
		t.Fatalf("a takes b's l2, not in the snapshot: claim %v, holder %q, %v; want refused, held by b", c, holder, err)
	}
}
