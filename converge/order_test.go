package converge_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/chaos"
)

// orderCheck publishes numbered messages per key and runs one worker per
// lane (lanes of any generation, found as they appear), checking that each
// key's numbers arrive exactly in order: nothing lost, repeated, replayed
// or skipped. It is the chaos test's checker with strict assertions: these
// tests kill nothing, so not even a repeat is allowed.
type orderCheck struct {
	*chaos.Checker
	t testing.TB
}

func newOrderCheck(t testing.TB, js jetstream.JetStream, stream, design string, keys int) *orderCheck {
	c := chaos.New(js, stream, design, "msgs.received_from.*", keys)
	t.Cleanup(c.Close)
	return &orderCheck{Checker: c, t: t}
}

// publish sends n messages round-robin over the keys, synchronously.
func (o *orderCheck) publish(n int) { o.Publish(n) }

// publishInBackground keeps publishing until stopped.
func (o *orderCheck) publishInBackground() (stop func()) { return o.PublishInBackground(2000) }

// watchLanes starts a worker for every lane of the design that appears.
func (o *orderCheck) watchLanes() { o.Work() }

// processed is how many messages were processed in order so far.
func (o *orderCheck) processed() int { return o.Counts().Processed }

// waitAllProcessed waits until every published message was processed.
func (o *orderCheck) waitAllProcessed(within time.Duration) {
	o.t.Helper()
	if !o.WaitProcessed(within) {
		o.t.Fatalf("not every published message was processed within %s: %v", within, o.Err())
	}
}

// assertInOrder fails on any message lost, repeated, replayed or skipped.
func (o *orderCheck) assertInOrder() {
	o.t.Helper()
	n := o.Counts()
	if err := o.Err(); err != nil || n.Repeated > 0 {
		o.t.Fatalf("per-key order broken: %v (%d repeated)", err, n.Repeated)
	}
	o.t.Logf("%d messages, all processed once, in order", n.Published)
}
