// Package kvlease is a lease held in a NATS KV bucket: a key with a TTL
// (nats-server 2.11+ per-key TTLs, the bucket's LimitMarkerTTL) that one
// holder creates, renews with a compare-and-set on its revision, and
// releases. A holder that stops renewing loses the key a TTL later, so
// nobody waits forever on a dead holder.
//
// The apply lock, the lanes work membership and the simulated kv-lease
// strategy are such leases. Writes the KV client cannot make (a
// conditional write that carries a TTL, a delete marker that expires) are
// published on the key's subject as the KV client publishes its own:
// behind the JetStream API prefix of a domain (Subject).
package kvlease

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
)

var (
	// ErrHeld: Acquire found the key held (it exists).
	ErrHeld = errors.New("the key is held")
	// ErrLost: the key is no longer the lease's (it expired, was removed,
	// or another holder wrote it).
	ErrLost = errors.New("the lease was lost")
)

// Lease is a held key. Its methods are not safe for concurrent use.
type Lease struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	key   string
	ttl   time.Duration
	value []byte
	rev   uint64
}

// Acquire creates key in kv with value and the TTL (whole seconds, 1s at
// least), only if it does not exist (or was deleted): ErrHeld otherwise.
// The value must tell this holding from any other (Renew relies on it).
func Acquire(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, value []byte, ttl time.Duration) (*Lease, error) {
	rev, err := kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
	if Conflict(err) {
		return nil, ErrHeld
	}
	if err != nil {
		return nil, err
	}
	return &Lease{js: js, kv: kv, key: key, ttl: ttl, value: value, rev: rev}, nil
}

// Adopt is a lease on a key found at revision rev, to be renewed (and so
// taken over) on that condition: a holder that is known dead, or an
// earlier life of this holder whose answer was lost.
func Adopt(js jetstream.JetStream, kv jetstream.KeyValue, key string, value []byte, ttl time.Duration, rev uint64) *Lease {
	return &Lease{js: js, kv: kv, key: key, ttl: ttl, value: value, rev: rev}
}

// Key is the lease's key; Revision its last revision.
func (l *Lease) Key() string      { return l.key }
func (l *Lease) Revision() uint64 { return l.rev }

// Renew rewrites the lease's value with a fresh TTL if the key is still at
// the lease's revision. A key at another revision that holds the same
// value is taken as a renewal whose answer was lost, and renewed from
// there. Anything else is ErrLost.
func (l *Lease) Renew(ctx context.Context) error { return l.Replace(ctx, l.value) }

// Replace renews the lease with a new value, on the same condition as
// Renew (the key holding the lease's current value).
func (l *Lease) Replace(ctx context.Context, value []byte) error {
	rev, err := l.write(ctx, value, l.rev)
	if Conflict(err) {
		e, gerr := l.kv.Get(ctx, l.key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			return ErrLost
		case gerr != nil:
			return gerr
		case e.Operation() != jetstream.KeyValuePut || string(e.Value()) != string(l.value):
			return ErrLost
		}
		rev, err = l.write(ctx, value, e.Revision())
		if Conflict(err) {
			return ErrLost
		}
	}
	if err != nil {
		return err
	}
	l.rev, l.value = rev, value
	return nil
}

func (l *Lease) write(ctx context.Context, value []byte, rev uint64) (uint64, error) {
	ack, err := l.js.PublishMsg(ctx, &nats.Msg{Subject: Subject(l.js, l.kv.Bucket(), l.key), Data: value},
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Release removes the key if it is still the lease's, with a delete
// marker that expires after markerTTL (0: one that stays). A key gone or
// taken since is not the lease's to remove: ErrLost, and nothing changes.
func (l *Lease) Release(ctx context.Context, markerTTL time.Duration) error {
	err := Delete(ctx, l.js, l.kv.Bucket(), l.key, l.rev, markerTTL)
	if Conflict(err) {
		return ErrLost
	}
	return err
}

// Delete writes a delete marker for key: on the condition that the key is
// at rev when rev > 0, expiring after markerTTL when it is positive.
func Delete(ctx context.Context, js jetstream.JetStream, bucket, key string, rev uint64, markerTTL time.Duration) error {
	m := nats.NewMsg(Subject(js, bucket, key))
	m.Header.Set("KV-Operation", "DEL")
	var opts []jetstream.PublishOpt
	if markerTTL > 0 {
		opts = append(opts, jetstream.WithMsgTTL(markerTTL))
	}
	if rev > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	_, err := js.PublishMsg(ctx, m, opts...)
	return err
}

// Subject is the subject a write of key in bucket goes to from js:
// $KV.<bucket>.<key>, behind js's API prefix when it is not the default (a
// JetStream domain), as the KV client writes it.
func Subject(js jetstream.JetStream, bucket, key string) string {
	s := "$KV." + bucket + "." + key
	if p := connect.APIPrefixOf(js); p != jetstream.DefaultAPIPrefix {
		return p + s
	}
	return s
}

// Conflict: a conditional write lost (the key exists, or is at another
// revision).
func Conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || jsapi.IsWrongLastSequence(err)
}
