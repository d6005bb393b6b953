package jsapi_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// TestListPagesAndTags lists more consumers than one page holds and finds
// the lanes among them by metadata.
func TestListPagesAndTags(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: creates 300 lanes to list past one page, 4s")
	}
	t.Parallel()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx := context.Background()
	p := testutil.PlanDesign(t, testutil.Seed(300))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: p.Stream.Name, Subjects: p.Stream.Subjects}); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Consumers {
		if _, err := js.CreateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{Durable: c.Durable, FilterSubject: c.FilterSubject,
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, Metadata: c.Metadata}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{Durable: "other"}); err != nil {
		t.Fatal(err)
	}
	conn, err := connect.Open(ctx, connect.Options{Server: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := jsapi.New(conn)
	l, err := api.List(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Consumers) != 301 || l.Requests != 2 {
		t.Fatalf("got %d consumers in %d requests, want 301 in 2", len(l.Consumers), l.Requests)
	}
	lanes := 0
	for _, ci := range l.Consumers {
		tag, ok := planner.TagOf(ci.Config.Metadata)
		if !ok {
			if ci.Name != "other" {
				t.Fatalf("%s not recognised as a lane", ci.Name)
			}
			continue
		}
		lanes++
		if want := planner.LaneName("orders", 300, tag.Partition); ci.Name != want || tag.Partitions != 300 {
			t.Fatalf("tag %+v on %s", tag, ci.Name)
		}
	}
	if lanes != 300 {
		t.Fatalf("found %d lanes, want 300", lanes)
	}
	if _, err := api.List(ctx, "NOPE"); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("listing a missing stream: want stream not found, got %v", err)
	}
}
