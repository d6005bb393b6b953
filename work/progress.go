package work

import (
	"sync"
	"time"
)

// progressTimer is a serial lane's in-progress ack timer. It stays armed
// from one message to the next while the lane drains, and is disarmed
// only when it fires with no message running: arming and stopping a timer
// around every message cost a draining lane more than most of its own
// bookkeeping. When it fires for a message that started after it was
// armed, the lane arms it again for that message (see lane.progress).
type progressTimer struct {
	mu sync.Mutex
	t  *time.Timer
	at time.Time // when it fires; zero while disarmed
}

func newProgressTimer(fire func()) *progressTimer {
	pt := &progressTimer{t: time.AfterFunc(time.Hour, fire)}
	pt.t.Stop()
	return pt
}

// by makes the timer fire d after now at the latest.
func (pt *progressTimer) by(now time.Time, d time.Duration) {
	at := now.Add(d)
	pt.mu.Lock()
	if pt.at.IsZero() || pt.at.After(at) {
		pt.t.Reset(d)
		pt.at = at
	}
	pt.mu.Unlock()
}

// fired disarms it: the first thing the function it runs does, so that a
// message arming it from then on arms it again.
func (pt *progressTimer) fired() {
	pt.mu.Lock()
	pt.at = time.Time{}
	pt.mu.Unlock()
}

func (pt *progressTimer) stop() {
	pt.mu.Lock()
	pt.t.Stop()
	pt.at = time.Time{}
	pt.mu.Unlock()
}
