package work

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
)

// The upkeep of the membership while Run serves lanes: renewing the lease,
// joining again under a new epoch when it lapsed, watching the members and
// the lane records, recreating the bucket if it is deleted, and making the
// lanes pull again after a reconnect.

func (w *Worker) setKV(kv jetstream.KeyValue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kv = kv
}

// records is the lane records of this design, in the current bucket.
func (w *Worker) records() membership.Records {
	w.mu.Lock()
	defer w.mu.Unlock()
	return membership.Records{JS: w.js, KV: w.kv, Scope: w.scope}
}

// fence says how long the lanes of the current epoch may be served.
func (w *Worker) fence() *membership.Fence { return w.sess.Fence() }

// memberEpochs is the live members and their epochs, as this instance sees
// them now.
func (w *Worker) memberEpochs() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.members)
}

// claimsFrom is when lanes may be taken: after the bucket was recreated,
// not before every instance that held lanes in the lost bucket has seen
// its lease lapse (their records are gone with it).
func (w *Worker) claimsFrom() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.claimsAfter
}

// wakeLane makes a lane waiting for its holder's hand-over look again.
func (w *Worker) wakeLane(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.running[name]; l != nil {
		l.wake()
	}
}

// leaderElected: the lane's consumer has a new leader; the requests that
// waited at the old one are gone, and so may be deliveries on their way.
func (w *Worker) leaderElected(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.running[name]; l != nil {
		l.relost()
	}
}

// connectionChanged follows the connection: a reconnect loses the pull
// requests waiting at the server (a restarted server, or a node that went
// away), so every lane asks again at once instead of after three missed
// heartbeats.
func (w *Worker) connectionChanged(st nats.Status) {
	if st != nats.CONNECTED {
		w.log.Warn("disconnected from the server: reconnecting; the lanes pull again once connected")
		return
	}
	w.mu.Lock()
	for _, l := range w.running {
		l.relost()
	}
	n := len(w.running)
	w.mu.Unlock()
	w.log.Info("reconnected: every lane asks for its next message again", "server", connect.Redact(w.nc.ConnectedUrlRedacted()), "lanes", n)
}

// watches are the two membership watches: the members (joins, leaves,
// expiries) and the lane records (hand-overs).
type watches struct {
	cancel  context.CancelFunc
	members <-chan membership.MemberEvent
	records <-chan string
}

func (w *Worker) startWatches() (*watches, error) {
	ctx, cancel := context.WithCancel(context.Background())
	kv := w.records().KV
	members, err := membership.WatchMembers(ctx, kv, w.scope, w.cfg.Timeout)
	if err != nil {
		cancel()
		return nil, err
	}
	records, err := membership.WatchLaneRecords(ctx, kv, w.scope, w.cfg.Timeout)
	if err != nil {
		cancel()
		return nil, err
	}
	return &watches{cancel: cancel, members: members, records: records}, nil
}

func (ws *watches) stop() {
	if ws != nil {
		ws.cancel()
	}
}

// beat is the running heartbeat.
type beat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *Worker) startHeartbeat(ls *membership.Session) *beat {
	ctx, cancel := context.WithCancel(context.Background())
	b := &beat{cancel: cancel, done: make(chan struct{})}
	go w.heartbeat(ctx, ls, b.done)
	return b
}

func (b *beat) stop() {
	b.cancel()
	<-b.done
}

// heartbeat renews the lease every third of it. When the epoch lapses
// (renewals did not get through in time) or the key is gone, the lanes of
// the epoch have stopped: the instance joins again under a new epoch,
// and the control loop starts its lanes again.
func (w *Worker) heartbeat(ctx context.Context, ls *membership.Session, done chan<- struct{}) {
	defer close(done)
	w.probe.beat()
	t := time.NewTicker(w.cfg.Lease / 3)
	defer t.Stop()
	rejoin := false
	for {
		_, lapsed := ls.Fence().Current()
		if rejoin {
			lapsed = nil // already known: retried at each tick
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-lapsed:
			rejoin = true
		}
		w.probe.beat()
		var err error
		if !rejoin {
			err = ls.Renew(ctx, w.cfg.Timeout)
		}
		switch {
		case rejoin || errors.Is(err, membership.ErrEvicted):
			if err := ls.Rejoin(ctx, w.cfg.Timeout, w.log); err != nil {
				rejoin = true
				if ctx.Err() == nil {
					w.probe.renewed(err)
					w.log.Error("cannot join the membership again", "error", err)
					if bucketMissing(err) {
						signal(w.trouble)
					}
				}
				continue
			}
			rejoin = false
			w.probe.renewed(nil)
			signal(w.wake)
		case err != nil && ctx.Err() == nil:
			w.probe.renewed(err)
			w.log.Warn("cannot renew the membership lease", "error", err)
			if bucketMissing(err) {
				signal(w.trouble)
			}
		case err == nil:
			w.probe.renewed(nil)
		}
	}
}

// bucketMissing: a write to the bucket found no stream to store it.
func bucketMissing(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrBucketNotFound) || jsapi.IsStreamNotFound(err)
}

// repair runs when a membership watch ended or a renewal found no bucket.
// A bucket that still exists only needs watching again. A deleted one is
// recreated, as a fresh start would, and the instance joins it under a
// new epoch; its own lanes stop now (their records were lost with the
// bucket), and no lane is taken before a lease has passed, when no
// instance can still hold one under its old epoch.
func (w *Worker) repair(ctx context.Context, ls *membership.Session, hb *beat) error {
	rctx, cancel := w.ctx(ctx)
	_, err := w.js.KeyValue(rctx, w.cfg.Bucket)
	cancel()
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return err
	}
	w.log.Warn("the membership bucket was deleted: recreating it; lanes are taken again once no instance can still serve them under the lost bucket (a lease)",
		"bucket", w.cfg.Bucket, "lease", w.cfg.Lease.String())
	hb.cancel()
	<-hb.done
	defer func() { *hb = *w.startHeartbeat(ls) }()
	ls.Lose()
	rctx, cancel = w.ctx(ctx)
	kv, err := membership.Open(rctx, w.js, w.cfg.Bucket, w.replicas)
	cancel()
	if err != nil {
		return err
	}
	w.setKV(kv)
	w.mu.Lock()
	w.claimsAfter = time.Now().Add(w.cfg.Lease + ls.Fence().Margin())
	w.mu.Unlock()
	ls.Bucket(kv)
	if err := ls.Join(ctx, w.cfg.Timeout); err != nil {
		return err
	}
	w.probe.renewed(nil)
	signal(w.wake)
	return nil
}
