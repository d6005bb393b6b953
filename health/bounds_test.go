package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
)

// TestHugePartitionCounts: a live stream transform or lane metadata with a
// partition count far beyond the bound is reported, never looped over (a
// catch-all consumer would be checked against every partition) nor hashed
// modulo 2^32 (a division by zero).
func TestHugePartitionCounts(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "HUGE", Subjects: []string{"huge.*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "huge.*", Destination: "huge.{{partition(2000000000,1)}}.{{wildcard(1)}}"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, "huge.alice", nil); err != nil {
		t.Fatal(err)
	}
	// An audit consumer on everything, and a lane whose metadata names a
	// destination with 2^32 partitions.
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "odd", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "huge.7.*",
		Metadata: map[string]string{planner.MetaDesign: "odd", planner.MetaPartition: "7", planner.MetaPartitions: "4294967296",
			planner.MetaSource: "huge.*", planner.MetaDestination: "huge.{{partition(4294967296,1)}}.{{wildcard(1)}}"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *health.Report, 1)
	go func() { done <- e.read("HUGE") }()
	var r *health.Report
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("inspect loops over a huge partition count")
	}
	f := mustFind(t, r, "unusable_mapping", "", health.Warning)
	if want := "more than 16384 lanes"; !strings.Contains(f.Message, want) {
		t.Fatalf("the finding should say the count is beyond the bound: %s", f.Message)
	}
}
