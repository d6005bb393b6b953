package membership

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Fence says whether this instance may still act as the owner of the lanes
// it took. A lane is held under a membership epoch (one life of the
// instance's lease key): the others take its lanes only once that key is
// gone (expired, removed) or carries another epoch, and the key cannot be
// gone before the last renewal this instance sent plus the lease. So the
// epoch is good on this instance's monotonic clock until then, less a
// margin; after that, or once the lease is known lost or left, the lanes
// of the epoch send no pull request and run no delivery they receive.
//
// Stale writes are what this guards against: an instance frozen (SIGSTOP,
// a long pause) or cut off with a pull request in its write buffer sends
// it when it comes back, after its successor took the lane; whatever that
// request brings is dropped unrun, and comes back to the successor after
// its ack wait.
type Fence struct {
	margin time.Duration

	mu     sync.Mutex
	epoch  string
	until  time.Time     // monotonic: the epoch's lease cannot have run out before this
	left   bool          // the instance left the membership: no more pulls
	lapsed chan struct{} // closed when the epoch ends without a leave
	ended  context.Context
	end    context.CancelFunc // ends ended as lapsed is closed
	timer  *time.Timer

	// now is a copy of the fields above, replaced (under mu) at each
	// change: Check, which every lane runs several times a message, reads
	// it without the lock.
	now atomic.Pointer[fenceState]
}

type fenceState struct {
	epoch  string
	until  time.Time
	left   bool
	lapsed chan struct{}
}

// publish makes the current fields what Check reads. f.mu is held.
func (f *Fence) publish() {
	f.now.Store(&fenceState{epoch: f.epoch, until: f.until, left: f.left, lapsed: f.lapsed})
}

// margin is how much sooner than its lease an epoch ends: far more
// than two clocks can drift apart over a lease, and the server expires a
// key a second or more after its TTL anyway.
func margin(lease time.Duration) time.Duration { return max(lease/10, 100*time.Millisecond) }

// NewFence is the fence of a lease of the given length, with no epoch yet.
func NewFence(lease time.Duration) *Fence {
	f := &Fence{margin: margin(lease), lapsed: make(chan struct{})}
	f.ended, f.end = context.WithCancel(context.Background())
	f.publish()
	return f
}

// begin starts a new epoch whose key was written at sent (before the
// request went out) with the given lease.
func (f *Fence) begin(epoch string, sent time.Time, lease time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopTimer()
	f.epoch, f.left, f.lapsed = epoch, false, make(chan struct{})
	f.ended, f.end = context.WithCancel(context.Background())
	f.extendLocked(sent, lease)
	f.publish()
}

// extend follows a renewal of epoch confirmed by the server, sent at sent.
// A renewal confirmed after the epoch lapsed does not revive it: its
// lanes have stopped, and the instance joins again under a new epoch.
func (f *Fence) extend(epoch string, sent time.Time, lease time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != f.epoch || f.isLapsed() {
		return
	}
	f.extendLocked(sent, lease)
}

func (f *Fence) extendLocked(sent time.Time, lease time.Duration) {
	until := sent.Add(lease - f.margin)
	if until.Before(f.until) && f.timer != nil {
		return
	}
	f.until = until
	f.publish()
	f.stopTimer()
	lapsed, epoch := f.lapsed, f.epoch
	f.timer = time.AfterFunc(time.Until(until), func() { f.lapse(epoch, lapsed) })
}

// lapse ends epoch (if it is still the current one): its lease may have
// run out, or is known lost.
func (f *Fence) lapse(epoch string, lapsed chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != f.epoch || f.lapsed != lapsed || f.isLapsed() {
		return
	}
	f.stopTimer()
	close(f.lapsed)
	f.end()
}

// lose ends the current epoch at once: its key is known to be gone.
func (f *Fence) lose() {
	f.mu.Lock()
	epoch, lapsed := f.epoch, f.lapsed
	f.mu.Unlock()
	f.lapse(epoch, lapsed)
}

// leave marks the epoch left: no more pull requests, but the messages in
// flight still finish and are acked (a stop hands the lanes over).
func (f *Fence) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = true
	f.publish()
}

// Current returns the epoch and a channel closed when it lapses.
func (f *Fence) Current() (string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch, f.lapsed
}

// CurrentContext returns the epoch and a context that ends when it lapses,
// with its Done closed with Current's channel: context.AfterFunc on it
// runs a function at the lapse, with no goroutine waiting for it.
func (f *Fence) CurrentContext() (string, context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch, f.ended
}

// Standing is what lanes taken under an epoch may still do.
type Standing int

const (
	// Held: pull, and run what comes.
	Held Standing = iota
	// Left: the instance left the membership (a stop): no more pulls;
	// what is in flight finishes and is acked, what arrives is handed
	// back.
	Left
	// Lapsed: the epoch's lease may have run out, or is known lost:
	// another instance may hold the lanes. No more pulls, and what
	// arrives is dropped unrun (no nak: it may be running elsewhere).
	Lapsed
)

// Check says where lanes taken under epoch stand.
func (f *Fence) Check(epoch string) Standing { return f.CheckAt(epoch, time.Now()) }

// CheckAt is Check as of now, a time just read: a lane reads the clock
// once for the several checks it makes of one message.
func (f *Fence) CheckAt(epoch string, now time.Time) Standing {
	st := f.now.Load()
	switch {
	case epoch == "" || epoch != st.epoch || closed(st.lapsed) || !now.Before(st.until):
		return Lapsed
	case st.left:
		return Left
	}
	return Held
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Holds: lanes taken under epoch may still pull and run what comes.
func (f *Fence) Holds(epoch string) bool { return f.Check(epoch) == Held }

func (f *Fence) isLapsed() bool {
	select {
	case <-f.lapsed:
		return true
	default:
		return false
	}
}

func (f *Fence) stopTimer() {
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
}

// Margin is how much sooner than its lease an epoch ends.
func (f *Fence) Margin() time.Duration { return f.margin }
