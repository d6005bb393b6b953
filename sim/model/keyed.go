package model

import (
	"slices"
	"time"

	"github.com/lanes-dev/lanes/sim/judge"
)

// Key-parallel lanes (lane.keys_in_flight K above 1), as lanes work runs
// them: the lane is a consumer with max ack pending K, pinned, so one
// owner receives everything. The owner has a pull waiting for every free
// slot of its window, so the server delivers whenever fewer than K
// messages are unsettled. The owner gates deliveries per key: a message
// runs at once when no earlier message of its key is unsettled; otherwise
// it waits in its key's queue, in stream order, holding its slot. When a
// key's message is settled (acked, or dropped by max deliver), the key's
// next waiting message starts, and the freed slot brings the next
// delivery. So up to K distinct keys run at once, one message per key,
// and a key whose message keeps failing holds only its own messages,
// until they fill the whole window.
//
// Redelivery, as for serial lanes:
//   - a waiting message never runs out of ack wait: the owner sends it
//     in-progress acks while it waits (lanes work does, whatever
//     --in-progress says);
//   - a running handler's ack deadline is the serial lane's, counted
//     from when it starts (its last in-progress ack while it waited):
//     with --in-progress it never passes while the owner lives;
//   - a crash ends the handler, not the owner, which keeps its pin and
//     its other keys: the message keeps its slot and its key until its
//     ack deadline passes, then the server redelivers it to the owner,
//     which runs it again. (lanes work retries a failed handler when its
//     ack deadline would have passed; the simulation's live run does the
//     same.)
//   - a handler that outlives its ack deadline (no in-progress acks) has
//     its message redelivered to the owner, which holds it already: the
//     copy is not run beside it; the running attempt's ack settles it.

// keyGate is one key's gate at its lane's owner.
type keyGate struct {
	// head is the message that holds the key: running, or failed and
	// waiting for its redelivery; -1 when the key is free.
	head    int32
	running bool
	crash   bool          // the running attempt ends in a failure
	end     time.Duration // when the running attempt ends
	exec    judge.Exec
	queue   []int32 // received, waiting for the key, in stream order
}

func newKeyGates(n int) []keyGate {
	g := make([]keyGate, n)
	for k := range g {
		g[k].head = -1
	}
	return g
}

// dispatchKeyed delivers to the owner while the window has room (or a
// redelivery is due): the owner always has a pull waiting for its free
// slots.
func (s *sim) dispatchKeyed(c *consumer) {
	for {
		m := s.take(c)
		if m < 0 {
			return
		}
		s.receive(c, m)
	}
}

// receive is one delivery to the owner, who runs it or queues it behind
// its key.
func (s *sim) receive(c *consumer, m int32) {
	st := &s.msgs[m]
	st.deliveries++
	g := &s.keys[s.w.Messages[m].Key]
	switch {
	case g.head == m && g.running:
		// Redelivered while its handler runs: the owner does not run the
		// copy; the new delivery has its own ack deadline.
		s.scheduleExpire(m, s.now, g.end-s.now, g.crash)
	case g.head == m:
		s.start(c, m) // it failed; here it is again
	case g.head < 0:
		g.head = m
		s.start(c, m)
	default:
		i, _ := slices.BinarySearch(g.queue, m)
		g.queue = slices.Insert(g.queue, i, m)
	}
}

// start runs the key's head message.
func (s *sim) start(c *consumer, m int32) {
	g := &s.keys[s.w.Messages[m].Key]
	work, crash := s.w.Attempt(int(m), int(s.msgs[m].deliveries))
	g.running, g.crash, g.end = true, crash, s.now+work
	g.exec = s.rec.Begin(int(m), c.lane, s.now)
	s.events.push(event{at: g.end, kind: evKeyEnd, a: m})
	s.scheduleExpire(m, s.now, work, crash)
}

// onKeyEnd: the handler of message m returns. On success the owner acks
// it (the slot frees) and the key's next waiting message starts; on a
// failure the message keeps its key until it is redelivered or dropped.
func (s *sim) onKeyEnd(m int32) {
	k := s.w.Messages[m].Key
	g := &s.keys[k]
	g.running = false
	c := s.consumerOf(m)
	st := &s.msgs[m]
	if g.crash {
		s.rec.End(g.exec, s.now, judge.Crashed)
		if st.status == msgDropped {
			s.advance(c, k) // max deliver used up while it ran
		}
		return
	}
	s.rec.End(g.exec, s.now, judge.Done)
	if st.status == msgPending {
		st.status = msgAcked
		c.pending--
	}
	s.advance(c, k)
	s.dispatch(c)
}

// dropped: the server dropped m (max deliver used up); a key it held
// while waiting for its redelivery goes on.
func (s *sim) dropped(m int32) {
	k := s.w.Messages[m].Key
	if g := &s.keys[k]; g.head == m && !g.running {
		s.advance(s.consumerOf(m), k)
	}
}

// advance frees key k and starts its next waiting message.
func (s *sim) advance(c *consumer, k int) {
	g := &s.keys[k]
	g.head = -1
	if len(g.queue) == 0 {
		return
	}
	g.head = g.queue[0]
	g.queue = g.queue[1:]
	s.start(c, g.head)
}
