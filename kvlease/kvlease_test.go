package kvlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/kvlease"
)

func bucket(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "leases", History: 1, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// exercise takes a lease through its life on js: acquire, refused to a
// second holder, renewed (also after a renewal whose answer was lost),
// replaced, expired when not renewed, released.
func exercise(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	l, err := kvlease.Acquire(ctx, js, kv, "a", []byte("one"), 2*time.Second)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := kvlease.Acquire(ctx, js, kv, "a", []byte("two"), 2*time.Second); !errors.Is(err, kvlease.ErrHeld) {
		t.Fatalf("a second acquire: %v, want ErrHeld", err)
	}
	before := l.Revision()
	if err := l.Renew(ctx); err != nil || l.Revision() <= before {
		t.Fatalf("renew: %v (revision %d after %d)", err, l.Revision(), before)
	}
	// A renewal whose answer was lost: the key moved on with the same value.
	stale := kvlease.Adopt(js, kv, "a", []byte("one"), 2*time.Second, before)
	if err := stale.Renew(ctx); err != nil {
		t.Fatalf("renew after a lost answer: %v", err)
	}
	if err := l.Renew(ctx); err == nil {
		// l's revision is stale now, and the value is the same: taken as
		// a lost answer too.
	} else {
		t.Fatalf("renew of the same value at an older revision: %v", err)
	}
	if err := l.Replace(ctx, []byte("one, again")); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if err := stale.Renew(ctx); !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("renew of a value replaced since: %v, want ErrLost", err)
	}
	e, err := kv.Get(ctx, "a")
	if err != nil || string(e.Value()) != "one, again" {
		t.Fatalf("the key holds %v, %v", e, err)
	}

	// Not renewed, it expires (1-1.25 s after its TTL), and another takes it.
	deadline := time.Now().Add(10 * time.Second)
	var next *kvlease.Lease
	for next == nil {
		next, err = kvlease.Acquire(ctx, js, kv, "a", []byte("two"), 2*time.Second)
		if err != nil && !errors.Is(err, kvlease.ErrHeld) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease did not expire")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := l.Renew(ctx); !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("renew of an expired lease taken by another: %v, want ErrLost", err)
	}
	if err := l.Release(ctx, 0); !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("release of a lease taken by another: %v, want ErrLost (not ours to remove)", err)
	}
	if _, err := kv.Get(ctx, "a"); err != nil {
		t.Fatalf("releasing a lost lease removed the new holder's key: %v", err)
	}
	if err := next.Release(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "a"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after release: %v, want not found", err)
	}
	if _, err := kvlease.Acquire(ctx, js, kv, "a", []byte("three"), 2*time.Second); err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	_, js := natstest.Connect(t, s.URL())
	exercise(t, js, bucket(t, js))
}

// TestLeaseAcrossADomain: a client of a leaf node holds a lease in a
// bucket of the hub's JetStream domain. The writes the KV client cannot
// make (a conditional write with a TTL, an expiring delete marker) must go
// behind the domain's API prefix as the KV client's own do: published on
// a bare $KV subject they would reach the leaf's JetStream, where no
// bucket stores them.
func TestLeaseAcrossADomain(t *testing.T) {
	t.Parallel()
	_, leaf := natstest.StartLeaf(t)
	nc, err := nats.Connect(leaf.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if got := kvlease.Subject(js, "leases", "a"); got != "$JS.hub.API.$KV.leases.a" {
		t.Errorf("subject %s", got)
	}
	exercise(t, js, bucket(t, js))
}
