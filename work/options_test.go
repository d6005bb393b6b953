package work

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
)

// TestNoProgressAcks: without in-progress acks a handler slower than the
// ack wait sees its message run again beside it by another instance serving
// the lane (what lanes simulate --live shows for several workers per lane
// without in-progress acks). With them (the default) it does not: see
// TestSlowerThanAckWait. The instances are in buckets of their own, so
// both serve the lane.
func TestNoProgressAcks(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1, ackWait(time.Second))
	rec := &recorder{}
	slow := func(ctx context.Context, m *Msg) error {
		if m.Attempt == 1 {
			time.Sleep(1500 * time.Millisecond)
		}
		return nil
	}
	for _, name := range []string{"a", "b"} {
		startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Bucket: "group_" + name, NoProgressAcks: true},
			rec.handler(name, slow))
	}
	testutil.WaitFor(t, "both instances pulling", 30*time.Second, func() bool {
		info, err := js.Consumer(context.Background(), p.Stream.Name, p.Lanes[0].Name)
		return err == nil && info.CachedInfo().NumWaiting == 2
	})
	publishKeys(t, js, p, 1, 1)
	testutil.WaitFor(t, "the redelivery", 30*time.Second, func() bool {
		calls := rec.snapshot()
		return len(calls) == 2 && calls[0].attempt == 2 && calls[1].attempt == 1 && calls[0].instance != calls[1].instance
	})
}

// TestBucketSeparatesMemberships: instances in different buckets do not
// see each other, so each serves every lane; lanes_work is not created.
func TestBucketSeparatesMemberships(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 4)
	cfg := Config{Stream: p.Stream.Name, Design: p.Design.Name}
	a, b := cfg, cfg
	a.Instance, a.Bucket = "a", "group_a"
	b.Instance, b.Bucket = "b", "group_b"
	wa := startWorker(t, s.URL(), a, (&recorder{}).handler("a", nil))
	wb := startWorker(t, s.URL(), b, (&recorder{}).handler("b", nil))
	testutil.WaitFor(t, "both instances on every lane", 30*time.Second, func() bool {
		sv := serving(wa, wb)
		for _, l := range p.Lanes {
			if len(sv[l.Name]) != 2 {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"group_a", "group_b"} {
		if _, err := js.KeyValue(ctx, name); err != nil {
			t.Errorf("bucket %s: %v", name, err)
		}
	}
	if _, err := js.KeyValue(ctx, membership.Bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("bucket %s: %v, want not found", membership.Bucket, err)
	}
	if err := (Config{Stream: "S", Design: "d", Bucket: "a.b"}).Validate(); err == nil {
		t.Error("a bucket name with a dot was accepted")
	}
}
