package converge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestPrune: a consumer tagged as a lane of the design but not in it (a
// duplicate of partition 0 under another name) is left alone by default,
// refused for --prune while it has messages, deleted with --force or once
// drained. Consumers of other designs and tools are never touched.
func TestPrune(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	ctx := context.Background()
	p := testutil.PlanDesign(t, testutil.Seed(2))
	apply(t, c, p, converge.Options{})
	meta := map[string]string{}
	for k, v := range p.Consumers[0].Metadata {
		meta[k] = v
	}
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{Durable: "orders-old-00", FilterSubject: p.Consumers[0].FilterSubject,
		AckPolicy: jetstream.AckExplicitPolicy, Metadata: meta}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	publishSeq(t, js, keysIn(p, 0, 1), 3)
	testutil.WaitFor(t, "the duplicate lane to count its 3 messages", 10*time.Second, func() bool { // num_pending is updated asynchronously
		return consumerInfo(t, js, p.Stream.Name, "orders-old-00").NumPending == 3
	})

	d, res := apply(t, c, p, converge.Options{})
	if d.Counts()[converge.ActionKeep] != 1 || d.OtherConsumers != 1 || res.Deleted != 0 {
		t.Fatalf("without --prune: %+v others=%d", d.Counts(), d.OtherConsumers)
	}
	_, _, err := converge.Apply(ctx, c, p, converge.Options{Prune: true})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("pruning a lane with messages needs --force: %v", err)
	}
	_, res = apply(t, c, p, converge.Options{Prune: true, Force: true})
	if res.Deleted != 1 {
		t.Fatalf("--prune --force deleted %d", res.Deleted)
	}
	if _, err := js.Consumer(ctx, p.Stream.Name, "orders-old-00"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("pruned lane still there: %v", err)
	}
	if _, err := js.Consumer(ctx, p.Stream.Name, "audit"); err != nil {
		t.Fatalf("another tool's consumer was touched: %v", err)
	}
}

// TestRecreateOnInterestStream: on an interest-retention stream, deleting
// a lane drops the messages only it was interested in; the recreate record
// holds that interest, so nothing is lost.
func TestRecreateOnInterestStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	d := testutil.Seed(2)
	d.Stream.Retention = "interest"
	p := testutil.PlanDesign(t, d)
	apply(t, c, p, converge.Options{})
	seqs := publishSeq(t, js, keysIn(p, 0, 2), 5)
	lane := p.Consumers[0].Durable
	m := next(t, js, p.Stream.Name, lane)
	m.DoubleAck(context.Background())

	changed := d
	changed.Lane.MaxWaiting = 32
	_, res := apply(t, c, testutil.PlanDesign(t, changed), converge.Options{Recreate: true})
	if len(res.Recreated) != 2 {
		t.Fatalf("recreated %+v", res.Recreated)
	}
	for _, want := range seqs[1:] {
		m := next(t, js, p.Stream.Name, lane)
		if got := seqOf(t, m); got != want {
			t.Fatalf("after recreating on an interest stream got seq %d, want %d", got, want)
		}
		m.DoubleAck(context.Background())
	}
}
