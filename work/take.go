package work

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/membership"
)

// snapshotFrom is how many lanes taking at once make their records read
// in one go (membership.Records.Snapshot) instead of one request each: an
// instance starting with 16,384 lanes saves about a second.
const snapshotFrom = 64

// recordSnapshot is the lane records read at once for a burst of takes,
// good for a second: a record changed since makes the take's write fail,
// and the take then reads the record itself (TakeKnown).
type recordSnapshot struct {
	taking atomic.Int64 // lanes in take now

	mu      sync.Mutex // held while reading: the other takes wait for it
	at      time.Time
	entries map[string]jetstream.KeyValueEntry // nil: the last read failed
}

// takeRecord makes one attempt to take a lane's record (see
// membership.Records.Take).
func (w *Worker) takeRecord(lane string, rec membership.LaneServer) (*membership.Claim, string, error) {
	w.snap.taking.Add(1)
	defer w.snap.taking.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	if e, known := w.knownRecord(lane); known {
		return w.records().TakeKnown(ctx, lane, e, rec, w.memberEpochs())
	}
	return w.records().Take(ctx, lane, rec, w.memberEpochs())
}

// knownRecord is lane's record from a snapshot under a second old (nil:
// none), read now if snapshotFrom lanes or more are taking; false: read
// it alone.
func (w *Worker) knownRecord(lane string) (jetstream.KeyValueEntry, bool) {
	s := &w.snap
	if s.taking.Load() < snapshotFrom {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.at) > time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		s.entries, _ = w.records().Snapshot(ctx)
		cancel()
		s.at = time.Now()
	}
	if s.entries == nil {
		return nil, false
	}
	return s.entries[lane], true
}
