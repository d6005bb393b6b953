package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/kvlease"
)

// Quarantine is a key that lanes work stopped (--on-poison quarantine):
// one of its messages failed ParkAfter times, so that message and every
// later one of the key are parked, in order, without running, while every
// other key goes on. It is kept in the
// membership bucket under <scope>.q.<escaped key>, written create-only by
// the instance that saw the failure (the first failure stays the record),
// and every instance of the design honours it. lanes parked replay --key
// lifts it, in the states below (see work/quarantine.go for what an
// instance does in each).
type Quarantine struct {
	Key      string    `json:"key"`
	Lane     string    `json:"lane"`
	Seq      uint64    `json:"seq"` // the first failure's stream sequence
	At       time.Time `json:"at"`
	Instance string    `json:"instance"`
	Error    string    `json:"error,omitempty"`
	State    string    `json:"state"`
	// ReplayID marks the copies of the replay under way (header
	// Lanes-Replay-Id): those run; the key's other messages do not.
	ReplayID string `json:"replay_id,omitempty"`
	ReplayBy string `json:"replay_by,omitempty"`
}

// States of a quarantined key.
const (
	// QuarantineOn: every message of the key is parked unrun.
	QuarantineOn = "quarantined"
	// QuarantineReplaying: copies carrying ReplayID run; the key's other
	// messages are parked (they are replayed in a later round).
	QuarantineReplaying = "replaying"
	// QuarantineLifting: the last round is done; the key's other messages
	// are held (handed back with a delay, neither run nor parked) until
	// the record is deleted, then they run in order.
	QuarantineLifting = "lifting"
)

// QuarantineKey is the record's key for a message key.
func QuarantineKey(scope, key string) string { return scope + ".q." + escapeKey(key) }

// QuarantineKeys is the pattern of a design's quarantine records.
func QuarantineKeys(scope string) string { return scope + ".q.*" }

// QuarantineEntry is a record with its revision.
type QuarantineEntry struct {
	Quarantine
	Rev uint64
}

// ParseQuarantine reads a stored record; false for a delete, or a value
// that is not one.
func ParseQuarantine(e jetstream.KeyValueEntry) (*QuarantineEntry, bool) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return nil, false
	}
	var q QuarantineEntry
	if json.Unmarshal(e.Value(), &q.Quarantine) != nil || q.Seq == 0 {
		return nil, false
	}
	if q.State == "" {
		q.State = QuarantineOn
	}
	q.Rev = e.Revision()
	return &q, true
}

// ErrQuarantineChanged: the record changed (or appeared, or went) since
// it was read.
var ErrQuarantineChanged = errors.New("the quarantine record changed meanwhile")

// Quarantines reads and writes a design's quarantine records.
type Quarantines struct {
	KV    jetstream.KeyValue
	Scope string
}

// Get reads a key's record; nil when the key is not quarantined.
func (q Quarantines) Get(ctx context.Context, key string) (*QuarantineEntry, error) {
	e, err := q.KV.Get(ctx, QuarantineKey(q.Scope, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the quarantine of key %s: %w", key, err)
	}
	qe, _ := ParseQuarantine(e)
	return qe, nil
}

// Create writes a new record; ErrQuarantineChanged when the key has one.
func (q Quarantines) Create(ctx context.Context, r Quarantine) (*QuarantineEntry, error) {
	return q.put(ctx, r, 0)
}

// Update rewrites the record at revision prev (compare-and-set).
func (q Quarantines) Update(ctx context.Context, r Quarantine, prev uint64) (*QuarantineEntry, error) {
	return q.put(ctx, r, prev)
}

func (q Quarantines) put(ctx context.Context, r Quarantine, prev uint64) (*QuarantineEntry, error) {
	r.At = r.At.UTC()
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	key := QuarantineKey(q.Scope, r.Key)
	var rev uint64
	if prev == 0 {
		rev, err = q.KV.Create(ctx, key, b)
	} else {
		rev, err = q.KV.Update(ctx, key, b, prev)
	}
	if kvlease.Conflict(err) {
		return nil, ErrQuarantineChanged
	}
	if err != nil {
		return nil, fmt.Errorf("writing the quarantine of key %s: %w", r.Key, err)
	}
	return &QuarantineEntry{Quarantine: r, Rev: rev}, nil
}

// Lift deletes the record at revision rev: the key runs again.
func (q Quarantines) Lift(ctx context.Context, key string, rev uint64) error {
	err := q.KV.Delete(ctx, QuarantineKey(q.Scope, key), jetstream.LastRevision(rev))
	if kvlease.Conflict(err) {
		return ErrQuarantineChanged
	}
	if err != nil {
		return fmt.Errorf("lifting the quarantine of key %s: %w", key, err)
	}
	return nil
}

// quarantineOf reads a record found by ReadServing (key relative to the scope).
func quarantineOf(key string, e jetstream.KeyValueEntry) (Quarantine, bool) {
	if !strings.HasPrefix(key, "q.") {
		return Quarantine{}, false
	}
	qe, ok := ParseQuarantine(e)
	if !ok {
		return Quarantine{}, false
	}
	return qe.Quarantine, true
}
