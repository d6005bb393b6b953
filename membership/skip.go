package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/kvlease"
)

// Skip is an operator's request to settle a lane's head message without
// running it (lanes skip), kept in the membership bucket under
// <scope>.s.<lane>: one request per lane at a time, so that two operators
// never skip two messages. The instance serving the lane watches these
// keys: it stops the message's handler, settles the message as asked
// and writes the outcome (Done). A lane that no instance serves is
// settled by the command itself (Actor).
type Skip struct {
	Seq    uint64    `json:"seq"`
	Action string    `json:"action"` // SkipTerm or SkipPark
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	// DeadLetter is where a park publishes the message.
	DeadLetter string `json:"dead_letter,omitempty"`
	// Actor is who settles it: SkipByWorker (the instance serving the
	// lane, whichever it is when the message is in its hands) or
	// SkipByCommand (no instance served the lane: lanes skip does it).
	// An instance never runs a message a pending request names.
	Actor string `json:"actor"`
	// Done is the outcome, once the message is settled (or could not be).
	Done *SkipDone `json:"done,omitempty"`
}

// What a skip does, and who does it.
const (
	SkipTerm      = "term"
	SkipPark      = "park"
	SkipByWorker  = "worker"
	SkipByCommand = "command"
)

// SkipDone is how a skip ended.
type SkipDone struct {
	Result string    `json:"result"` // one of the Skip* results below
	By     string    `json:"by"`     // the instance, or "lanes skip"
	At     time.Time `json:"at"`
	Detail string    `json:"detail,omitempty"`
}

// Results of a skip.
const (
	SkipTerminated = "terminated" // +TERM, or a consumer reset past it
	SkipParked     = "parked"     // on the dead-letter subject, then acked (or reset past)
	// SkipRan: the handler finished the message before the skip reached
	// it; it was acked as usual.
	SkipRan = "ran"
	// SkipPassed: the lane had moved past the message already.
	SkipPassed = "passed"
)

// Pending reports whether the request still waits for its outcome.
func (s *Skip) Pending() bool { return s.Done == nil }

// SkipKey is the key of a lane's skip request.
func SkipKey(stream, design, lane string) string { return Scope(stream, design) + ".s." + lane }

// SkipKeys is the pattern of a design's skip requests (Scope).
func SkipKeys(scope string) string { return scope + ".s.*" }

// SkipEntry is a skip request with its revision in the bucket.
type SkipEntry struct {
	Skip
	Rev uint64
}

// ParseSkip reads a stored skip request.
func ParseSkip(e jetstream.KeyValueEntry) (*SkipEntry, bool) {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return nil, false
	}
	var s SkipEntry
	if json.Unmarshal(e.Value(), &s.Skip) != nil || s.Seq == 0 {
		return nil, false
	}
	s.Rev = e.Revision()
	return &s, true
}

// ErrSkipChanged: the skip request changed since it was read (another
// operator, or the instance writing its outcome).
var ErrSkipChanged = errors.New("the skip request changed meanwhile")

// Skips reads and writes a design's skip requests.
type Skips struct {
	KV     jetstream.KeyValue
	Stream string
	Design string
}

// OpenSkips binds the membership bucket, creating it when no worker ever
// ran (replicas: the stream's, at most 3).
func OpenSkips(ctx context.Context, js jetstream.JetStream, stream, design string, replicas int) (*Skips, error) {
	kv, err := Open(ctx, js, Bucket, min(max(replicas, 1), 3))
	if err != nil {
		return nil, err
	}
	return &Skips{KV: kv, Stream: stream, Design: design}, nil
}

// Get reads a lane's skip request; nil when there is none.
func (s *Skips) Get(ctx context.Context, lane string) (*SkipEntry, error) {
	e, err := s.KV.Get(ctx, SkipKey(s.Stream, s.Design, lane))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the skip request of lane %s: %w", lane, err)
	}
	se, _ := ParseSkip(e)
	if se == nil {
		return nil, nil
	}
	return se, nil
}

// Put writes a lane's skip request: a create when prev is 0 (nothing
// there), else a compare-and-set on revision prev. ErrSkipChanged when
// another write came first.
func (s *Skips) Put(ctx context.Context, lane string, sk Skip, prev uint64) (uint64, error) {
	b, err := json.Marshal(sk)
	if err != nil {
		return 0, err
	}
	key := SkipKey(s.Stream, s.Design, lane)
	var rev uint64
	if prev == 0 {
		rev, err = s.KV.Create(ctx, key, b)
	} else {
		rev, err = s.KV.Update(ctx, key, b, prev)
	}
	if kvlease.Conflict(err) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrSkipChanged
	}
	if err != nil {
		return 0, fmt.Errorf("writing the skip request of lane %s: %w", lane, err)
	}
	return rev, nil
}

// Finish writes a request's outcome, if the request is still the one at
// revision rev.
func (s *Skips) Finish(ctx context.Context, lane string, e *SkipEntry, done SkipDone) (uint64, error) {
	sk := e.Skip
	done.At = done.At.UTC()
	sk.Done = &done
	return s.Put(ctx, lane, sk, e.Rev)
}
