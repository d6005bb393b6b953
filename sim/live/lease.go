package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/lanes-dev/lanes/kvlease"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
)

// The lease mechanics (the kv-lease strategy) on a real server: the plain
// pull workers on one shared consumer, and a KV bucket of the sandbox's
// with per-key TTLs (LimitMarkerTTL, nats-server 2.11+) holding a lease
// per workload key. A worker that receives a message takes its key's lease
// with jetstream's KeyValue.Create and the lease TTL; the lease's revision
// is its fencing token. It works (with --in-progress it sends +WPI and
// renews the lease every TTL/3: a publish on the key conditional on its
// last revision, with a Nats-TTL header), writes with the token, releases
// the lease with a delete conditional on its revision (a lapsed lease's
// release fails: counted as lost), and acks. A key leased by another
// worker gets the message naked with the retry delay.

// leaseBucket names the sandbox's lease bucket.
func leaseBucket(stream string) string { return stream + "_LEASES" }

// openLeases creates the lease bucket, and binds it on every worker
// connection.
func (r *strategyRun) openLeases(ctx context.Context) error {
	name := leaseBucket(r.box.stream)
	ttl := r.o.Lease.TTL
	cfg := jetstream.KeyValueConfig{Bucket: name, Description: "lanes simulate: the kv-lease strategy's leases",
		History: 1, LimitMarkerTTL: ttl, Storage: jetstream.FileStorage, Replicas: max(r.box.plan.Stream.Replicas, 1)}
	if r.box.plan.Stream.Storage == "memory" {
		cfg.Storage = jetstream.MemoryStorage
	}
	r.box.buckets = append(r.box.buckets, name)
	rctx, cancel := r.c.Ctx(ctx)
	_, err := r.c.JS.CreateKeyValue(rctx, cfg)
	cancel()
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		return fmt.Errorf("the kv-lease strategy needs nats-server 2.11 or newer (per-key TTLs for its lease bucket)")
	}
	if err != nil {
		return fmt.Errorf("creating the lease bucket %s: %w", name, r.c.Classify(rctx, err))
	}
	r.leases = make([]jetstream.KeyValue, len(r.conns))
	for i, c := range r.conns {
		rctx, cancel := c.Ctx(ctx)
		r.leases[i], err = c.JS.KeyValue(rctx, name)
		cancel()
		if err != nil {
			return fmt.Errorf("lease bucket %s: %w", name, c.Classify(rctx, err))
		}
	}
	return nil
}

// leased handles one delivery under the lease mechanics.
func (wk *worker) leased(ctx context.Context, m jetstream.Msg, idx, attempt int) (outcome, error) {
	r := wk.r
	key := "k" + strconv.Itoa(r.w.Messages[idx].Key)
	rctx, cancel := wk.conn.Ctx(ctx)
	// The value names this holding: a renewal tells its own lost answer
	// from another worker's lease by it.
	lease, err := kvlease.Acquire(rctx, wk.conn.JS, wk.kv, key, []byte(nuid.Next()), r.o.Lease.TTL)
	cancel()
	switch {
	case ctx.Err() != nil:
		return stopped, nil
	case errors.Is(err, kvlease.ErrHeld):
		// Held by another worker (or taken between Create's read of a
		// released lease and its conditional write).
		r.rec.LeaseRetry()
		_ = wk.nakDelayed(m, attempt)
		return handled, nil
	case err != nil:
		return stopped, fmt.Errorf("taking the lease of key %s: %w", key, wk.conn.Classify(rctx, err))
	}

	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	work, crash := r.w.Attempt(idx, attempt)
	e := r.rec.BeginFenced(idx, wk.lane.index, r.now(), lease.Revision()) // its first revision is its fencing token
	lost := false
	renew := func() {
		if lost {
			return // a renewal cannot bring it back
		}
		rctx, cancel := wk.conn.Ctx(ctx)
		defer cancel()
		lost = errors.Is(lease.Renew(rctx), kvlease.ErrLost)
	}
	if !wk.work(ctx, m, work, renew) {
		return stopped, nil // interrupted: the execution stays open, as it was
	}
	if crash {
		r.rec.End(e, r.now(), judge.Crashed)
		return crashed, nil // the lease lapses at its TTL, the message after its ack wait
	}
	r.rec.End(e, r.now(), judge.Done) // the fenced write
	r.markDone(idx)
	rctx, cancel = wk.conn.Ctx(ctx)
	err = lease.Release(rctx, 0)
	cancel()
	switch {
	case lost || errors.Is(err, kvlease.ErrLost):
		r.rec.LeaseLost()
	case err != nil && ctx.Err() == nil:
		return stopped, fmt.Errorf("releasing the lease of key %s: %w", key, wk.conn.Classify(rctx, err))
	}
	_ = m.Ack()
	return handled, nil
}

// nakDelayed hands the message back to be redelivered after the lease
// retry delay, corrected for how the server waits after a nak on a
// consumer with a backoff (planner.NakDelay).
func (wk *worker) nakDelayed(m jetstream.Msg, attempt int) error {
	r := wk.r
	delay := planner.NakDelay(r.lane0.AckWait, r.lane0.BackOff, attempt, r.o.Lease.Retry)
	if delay <= 0 {
		return m.Nak()
	}
	return m.NakWithDelay(delay)
}

// leaseTick is how often a worker with in-progress acks sends them and
// renews its lease.
func (r *strategyRun) leaseTick() time.Duration {
	return max(min(r.ackWait, r.o.Lease.TTL)/3, time.Millisecond)
}
