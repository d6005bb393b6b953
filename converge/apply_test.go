package converge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestFreshApplyThenNoop: a fresh apply creates the stream and every lane
// as planned; a second apply finds nothing to do and sends no write.
func TestFreshApplyThenNoop(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	log := watchAPI(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(8))

	d, res := apply(t, c, p, converge.Options{})
	if !d.Pending() || !res.StreamCreated || res.Created != 8 {
		t.Fatalf("fresh apply: pending=%v stream created=%v lanes created=%d", d.Pending(), res.StreamCreated, res.Created)
	}
	nc, js := natstest.Connect(t, srv.URL())
	s, err := js.Stream(context.Background(), p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().Config
	if st.SubjectTransform == nil || st.SubjectTransform.Destination != p.Mapping.Destination || st.MaxConsumers != p.Stream.MaxConsumers {
		t.Fatalf("stream config %+v", st)
	}
	for _, want := range p.Consumers {
		got := consumerInfo(t, js, p.Stream.Name, want.Durable).Config
		if got.FilterSubject != want.FilterSubject || got.MaxAckPending != 1 || got.AckPolicy != jetstream.AckExplicitPolicy ||
			got.Metadata[planner.MetaDesign] != "orders" || got.Metadata[planner.MetaPartitions] != "8" {
			t.Fatalf("lane %s: %+v", want.Durable, got)
		}
	}
	log.since(t, c.NC, nc) // the test's own reads are not apply's

	d, res = apply(t, c, p, converge.Options{})
	if d.Pending() || res.WriteRequests != 0 {
		t.Fatalf("second apply: pending=%v writes=%d diff=%+v", d.Pending(), res.WriteRequests, d.Lanes)
	}
	seen := log.since(t, c.NC)
	if w := writes(seen); len(w) != 0 {
		t.Fatalf("second apply sent write requests: %v", w)
	}
	if len(seen) != d.ReadRequests || len(seen) > 3 {
		t.Fatalf("second apply made %d requests (%v), want the %d reads only", len(seen), seen, d.ReadRequests)
	}
}

// TestDryRunChangesNothing: Compare alone reads and never writes.
func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	log := watchAPI(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(4))
	apply(t, c, p, converge.Options{})

	changed := testutil.Seed(4)
	changed.Lane.AckWait = planner.Duration(time.Minute)
	p2 := testutil.PlanDesign(t, changed)
	log.since(t, c.NC)
	d, err := converge.Compare(context.Background(), c, p2, converge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := writes(log.since(t, c.NC)); len(w) != 0 {
		t.Fatalf("compare wrote: %v", w)
	}
	if got := d.Counts()[converge.ActionUpdate]; got != 4 {
		t.Fatalf("want 4 updates, got %+v", d.Counts())
	}
	ch := d.Lanes[0].Changes
	if len(ch) != 1 || ch[0].Field != "ack_wait" || string(ch[0].Old) != "30000000000" || string(ch[0].New) != "60000000000" {
		t.Fatalf("changes %+v", ch)
	}
	_, js := natstest.Connect(t, srv.URL())
	if got := consumerInfo(t, js, p.Stream.Name, p.Consumers[0].Durable).Config.AckWait; got != 30*time.Second {
		t.Fatalf("dry run changed ack wait to %s", got)
	}
}

// TestUpdateKeepsWhatDesignDoesNotDecide: an update changes the design's
// fields and leaves other settings and other tools' metadata alone.
func TestUpdateKeepsWhatDesignDoesNotDecide(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(2))
	apply(t, c, p, converge.Options{})
	ctx := context.Background()
	name := p.Consumers[0].Durable
	cfg := consumerInfo(t, js, p.Stream.Name, name).Config
	cfg.InactiveThreshold = time.Hour
	cfg.Metadata["team"] = "payments"
	if _, err := js.UpdateConsumer(ctx, p.Stream.Name, cfg); err != nil {
		t.Fatal(err)
	}
	d, _ := apply(t, c, p, converge.Options{})
	if d.Pending() {
		t.Fatalf("settings outside the design must not show as changes: %+v", d.Lanes[0].Changes)
	}
	changed := testutil.Seed(2)
	changed.Lane.MaxDeliver = 5
	apply(t, c, testutil.PlanDesign(t, changed), converge.Options{})
	got := consumerInfo(t, js, p.Stream.Name, name).Config
	if got.MaxDeliver != 5 || got.InactiveThreshold != time.Hour || got.Metadata["team"] != "payments" {
		t.Fatalf("update lost settings: max_deliver=%d inactive=%s metadata=%v", got.MaxDeliver, got.InactiveThreshold, got.Metadata)
	}
}

// TestImmutableChangeRefused: a change the server forbids is refused with
// the field named, and nothing at all is changed, not even mutable fields.
func TestImmutableChangeRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	log := watchAPI(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(3))
	apply(t, c, p, converge.Options{})

	changed := testutil.Seed(3)
	changed.Lane.MaxWaiting = 64       // immutable
	changed.Lane.MaxDeliver = 9        // mutable, must not be applied either
	changed.Stream.MaxConsumers = 4000 // a stream change, must not be applied either
	log.since(t, c.NC)
	d, res, err := converge.Apply(context.Background(), c, testutil.PlanDesign(t, changed), converge.Options{})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("want a refusal, got %v", err)
	}
	if !strings.Contains(err.Error(), "max_waiting 512 -> 64") || !strings.Contains(err.Error(), "--recreate") {
		t.Fatalf("refusal does not explain: %v", err)
	}
	if res.WriteRequests != 0 || len(writes(log.since(t, c.NC))) != 0 {
		t.Fatal("a refused apply wrote to the server")
	}
	if d.Counts()[converge.ActionRefused] != 3 {
		t.Fatalf("counts %+v", d.Counts())
	}
}
