package work

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Msg is one delivery of a lane's message to a handler.
type Msg struct {
	Stream    string
	Lane      string
	Partition int
	// Subject is the subject as stored (partitioned), e.g.
	// msgs.received_from.n8.7.alice.
	Subject string
	// Key is the ordering key: the key tokens of the subject joined by '.'.
	Key string
	// Seq is the stream sequence: it only grows for a key, so a handler can
	// use it as a version or fencing token for conditional writes.
	Seq uint64
	// Attempt is the delivery count: 1 the first time, more on redelivery.
	Attempt   int
	Published time.Time
	Header    nats.Header
	Data      []byte
	// Instance is the name of the instance running the handler.
	Instance string
}

// Handler processes one message. Returning nil acknowledges it; an error
// made by Term terminates it (the lane moves on); an error made by
// RetryAfter redelivers it after that delay; any other error redelivers it
// after the lane's backoff; an error made by Outage says the handler
// could not run at all (the message waits, and it is tried again). ctx
// ends when Config.MaxProcessTime passes, when the instance loses contact
// with the server for most of the ack wait, when another instance may
// take its key-parallel lane (its lease ran out), or when the instance is
// told to stop at once: a handler must return soon after, since the lane (on a
// key-parallel lane, the message's key) takes no other message until it
// does. Handle is called from many goroutines at once: one per lane, and
// on a key-parallel lane one per key in flight.
type Handler interface {
	Handle(ctx context.Context, m *Msg) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Msg) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Msg) error { return f(ctx, m) }

// TermError marks a message that must not be retried.
type TermError struct{ Err error }

func (e *TermError) Error() string { return "terminate: " + errText(e.Err) }
func (e *TermError) Unwrap() error { return e.Err }

// Term wraps err so that the message is terminated (+TERM, or parked when
// a dead-letter subject is set) instead of retried.
func Term(err error) error { return &TermError{Err: err} }

// RetryError asks for a redelivery after a given delay.
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.After, errText(e.Err))
}
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the message is redelivered after d.
func RetryAfter(d time.Duration, err error) error { return &RetryError{After: d, Err: err} }

// OutageError marks a handler that could not run at all: its program is
// missing, its service refuses connections, its output is closed. It says
// nothing about the message, so the message is neither retried as a
// failure nor parked nor terminated: it is kept, and the handler is tried
// again after a growing delay (see Worker.Outages).
type OutageError struct{ Err error }

func (e *OutageError) Error() string { return "the handler could not run: " + errText(e.Err) }
func (e *OutageError) Unwrap() error { return e.Err }

// Outage wraps err to say that the handler could not run (its environment
// failed, not the message): the message waits, never parked or
// terminated, and the handler is tried again.
func Outage(err error) error { return &OutageError{Err: err} }

func isOutage(err error) bool {
	var oe *OutageError
	return errors.As(err, &oe)
}

func errText(err error) string {
	if err == nil {
		return "no reason given"
	}
	return err.Error()
}

// outcome is what a handler's result means for the message.
type outcome int

const (
	outcomeAck   outcome = iota // done: double ack
	outcomeRetry                // failed: nak with a delay
	outcomeTerm                 // poison by the handler's word: term or park
)

func classify(err error) (outcome, time.Duration) {
	if err == nil {
		return outcomeAck, 0
	}
	var te *TermError
	if errors.As(err, &te) {
		return outcomeTerm, 0
	}
	var re *RetryError
	if errors.As(err, &re) {
		return outcomeRetry, re.After
	}
	return outcomeRetry, -1
}
