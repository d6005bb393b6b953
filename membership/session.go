package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/lanes-dev/lanes/kvlease"
)

// ErrEvicted: the instance's lease was lost (expired or removed) while it
// ran.
var ErrEvicted = errors.New("membership lease lost")

// Session is one instance's membership: its lease key <scope>.m.<instance>,
// holding its Member record, and the epochs of that key. Each join is a new
// epoch, named in the record; lanes are held under an epoch, and the
// session's Fence says how long they may be served under it. Renew,
// Rejoin and Leave are not safe for concurrent use.
type Session struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	key    string
	ttl    time.Duration
	fence  *Fence
	member Member
	record []byte // member as stored: its epoch changes with each join
	lease  *kvlease.Lease
}

// NewSession prepares the membership of the instance m names in scope,
// with a lease of ttl (whole seconds); Join joins.
func NewSession(js jetstream.JetStream, kv jetstream.KeyValue, scope string, m Member, ttl time.Duration) *Session {
	m.Renewed, m.Expired = time.Time{}, false
	return &Session{js: js, kv: kv, key: scope + ".m." + m.Instance, ttl: ttl, fence: NewFence(ttl), member: m}
}

// Fence says how long the lanes taken under the current epoch may be
// served.
func (s *Session) Fence() *Fence { return s.fence }

// Epoch is the current epoch ("" before the first join).
func (s *Session) Epoch() string { return s.member.Epoch }

// Bucket moves the session to a bucket opened anew (the old one was
// deleted); the next Join writes the key there.
func (s *Session) Bucket(kv jetstream.KeyValue) { s.kv = kv }

// Lose ends the current epoch at once: its key is known gone.
func (s *Session) Lose() { s.fence.lose() }

func (s *Session) newEpoch() {
	s.member.Epoch = nuid.Next()
	s.record, _ = json.Marshal(s.member)
}

// Join creates the key under a new epoch; it exists only while no other
// live instance holds this name. A name still held by an earlier life of
// this instance (killed before its lease expired) frees itself within a
// lease: Join waits that long before it gives up.
func (s *Session) Join(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(2*s.ttl + time.Second)
	s.newEpoch()
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		lease, err := kvlease.Acquire(rctx, s.js, s.kv, s.key, s.record, s.ttl)
		cancel()
		if err == nil {
			s.lease = lease
			s.fence.begin(s.member.Epoch, sent, s.ttl)
			return nil
		}
		if !errors.Is(err, kvlease.ErrHeld) {
			return fmt.Errorf("joining the membership (%s %s): %w", s.kv.Bucket(), s.key, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance name %q is held by a live instance (key %s in bucket %s): give each instance its own name", s.member.Instance, s.key, s.kv.Bucket())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Renew rewrites the key with a fresh TTL, only if it is still this
// epoch's (kvlease takes a renewal whose answer was lost for its own).
// A key that expired or was removed is ErrEvicted, and ends the epoch at
// once.
func (s *Session) Renew(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	err := s.lease.Renew(rctx)
	if errors.Is(err, kvlease.ErrLost) {
		s.fence.lose()
		return ErrEvicted
	}
	if err != nil {
		return err
	}
	s.fence.extend(s.member.Epoch, sent, s.ttl)
	return nil
}

// Rejoin follows a lease that was lost, or may have been: a renewal that
// found the key gone, or an epoch that lapsed on this instance's clock. A
// key still holding this epoch's record means nobody saw the instance
// leave: an epoch that has not lapsed carries on, and one that lapsed
// (its lanes have stopped) is replaced on the same key by a new one.
// Otherwise the key expired or was removed, and the instance joins again.
func (s *Session) Rejoin(ctx context.Context, timeout time.Duration, log *slog.Logger) error {
	if s.lease != nil {
		epoch, _ := s.fence.Current()
		if s.fence.Holds(epoch) {
			if err := s.Renew(ctx, timeout); err == nil {
				return nil
			}
		} else {
			old := s.record
			s.newEpoch()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			sent := time.Now()
			s.lease = kvlease.Adopt(s.js, s.kv, s.key, old, s.ttl, s.lease.Revision())
			err := s.lease.Replace(rctx, s.record)
			cancel()
			if err == nil {
				s.fence.begin(s.member.Epoch, sent, s.ttl)
				log.Warn("membership lease renewed late: its lanes were given up and are taken again")
				return nil
			}
		}
	}
	log.Warn("membership lease lost (expired or removed): joining again")
	return s.Join(ctx, timeout)
}

// Leave removes the key at once so the others take the lanes now, not a
// lease later; from then on the lanes of the epoch send no pull request.
// The delete marker itself expires after MarkerTTL.
func (s *Session) Leave(ctx context.Context, timeout time.Duration) error {
	s.fence.leave()
	if s.lease == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := s.lease.Release(rctx, MarkerTTL)
	if errors.Is(err, kvlease.ErrLost) {
		return nil // gone already: nothing to leave
	}
	return err
}
