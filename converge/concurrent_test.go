package converge_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestStreamUpdateKeepsOthersChanges: apply decides to raise
// max_consumers; before it sends the update (an operator reading the diff
// at the prompt), someone changes the stream's max_age and max_msgs. The
// update must start from the stream as it is when sent and change only
// max_consumers.
func TestStreamUpdateKeepsOthersChanges(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(4))
	apply(t, c, p, converge.Options{})

	more := testutil.Seed(4)
	more.Stream.MaxConsumers = 2000
	d, err := converge.Compare(context.Background(), c, testutil.PlanDesign(t, more), converge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Stream.Action != converge.ActionUpdate {
		t.Fatalf("want a stream update, got %s", d.Stream.Action)
	}

	ctx := context.Background()
	s, err := js.Stream(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	cfg.MaxMsgs = 5000
	cfg.Metadata = map[string]string{"team": "payments"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	if _, err := converge.Execute(ctx, c, d); err != nil {
		t.Fatal(err)
	}
	s, err = js.Stream(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := s.CachedInfo().Config
	if got.MaxConsumers != 2000 {
		t.Fatalf("max_consumers %d, want 2000", got.MaxConsumers)
	}
	if got.MaxAge != time.Hour || got.MaxMsgs != 5000 || got.Metadata["team"] != "payments" {
		t.Fatalf("apply reverted changes made since it read the stream: max_age %s, max_msgs %d, metadata %v", got.MaxAge, got.MaxMsgs, got.Metadata)
	}
}
