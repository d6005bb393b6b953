package work

import (
	"testing"
	"time"
)

// The in-progress ack timer, kept armed across messages, fires by the
// earliest time asked of it, and once fired is armed again by the next
// message: a message with a shorter deadline than the one it was armed
// for gets its in-progress ack in time.
func TestProgressTimerFiresByTheEarliest(t *testing.T) {
	fired := make(chan time.Time, 4)
	pt := newProgressTimer(func() { fired <- time.Now() })
	defer pt.stop()

	start := time.Now()
	pt.by(start, time.Hour)
	pt.by(start, 20*time.Millisecond) // a message with a shorter deadline
	pt.by(start, time.Hour)           // a longer one after it moves nothing
	select {
	case at := <-fired:
		if at.Sub(start) > 30*time.Second {
			t.Fatalf("fired after %v", at.Sub(start))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("armed for an hour, then asked for 20 ms: it never fired")
	}
	pt.fired()

	// Disarmed once fired: the next message arms it again.
	again := time.Now()
	pt.by(again, 20*time.Millisecond)
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("not armed again after it fired")
	}
	pt.fired()

	// Stopped: disarmed, so the next message arms it afresh.
	pt.by(time.Now(), time.Hour)
	pt.stop()
	pt.by(time.Now(), 20*time.Millisecond)
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("not armed again after a stop")
	}
}
