package model

import (
	"math"
	"time"
)

// The lease mechanics (the kv-lease strategy): workers share one consumer
// and a KV bucket with a lease per key. A worker that receives a message
// asks the server to create its key's lease (a round trip); when the key
// is free it gets the lease, whose revision is its fencing token, works,
// writes with the token (the Recorder's fenced store refuses a token below
// one it has accepted), releases the lease (another round trip: a delete
// that only succeeds while the lease is still the worker's), then acks.
// When another worker holds the key, it naks the message with the retry
// delay: the message keeps its ack-pending slot for that long, then comes
// back before any new message.
//
// Round trips are jetstream's KeyValue.Create's: a key never written is
// created in one; once a released (or lapsed) lease has left a delete
// marker, Create's conditional write fails, it reads the key and, finding
// it deleted, writes again conditional on the marker's revision: three
// (the read decides, a round trip and a half in); a key held by another
// worker costs two (the failed write, the read). A release is one.
//
// A delayed nak is what nats-server (2.11-2.15, consumer.go processNak and
// checkPending) does with it: the message keeps its ack-pending slot, and
// the consumer's redelivery check is re-armed to run 10ms after the nak;
// that check redelivers what is due and re-arms itself for the next due
// time. So a delay below 10ms waits 10ms, and delayed naks coming more
// often than every 10ms keep postponing every naked message's return until
// they pause: under a hot key the retries slow each other down.
//
// The server decides in the order requests reach it. A lease lapses at its
// TTL unless renewed: with in-progress acks the holder renews it every
// TTL/3 while it works, so it lapses only after a crash (one TTL after the
// last renewal); without, a job longer than the TTL loses its lease
// mid-job, and the key's next message can take it and start beside it.

// leaseState is one key's lease as the server holds it.
type leaseState struct {
	holder  int32 // the worker that took it; -1: free
	token   uint64
	expiry  time.Duration // when it lapses; forever while its holder renews it
	written bool          // the key has a value or a delete marker
}

const forever = time.Duration(math.MaxInt64)

// askLease takes the lease of the worker's message's key: the server
// decides when the request that decides reaches it (the create, or for a
// key already written the read after the failed create).
func (s *sim) askLease(wid int32) {
	at := s.now + s.cfg.RoundTrip/2
	if s.leases[s.w.Messages[s.workers[wid].msg].Key].written {
		at += s.cfg.RoundTrip
	}
	s.events.push(event{at: at, kind: evCreate, a: wid})
}

// onCreate: the create reaches the server, which grants it when the key
// is free or its lease has lapsed.
func (s *sim) onCreate(wid int32) {
	w := &s.workers[wid]
	l := &s.leases[s.w.Messages[w.msg].Key]
	granted := l.holder < 0 || s.now >= l.expiry
	trips := time.Duration(2) // refused: the failed create and the read
	if granted {
		trips = 1
		if l.written {
			trips = 3 // and the write conditional on the delete marker
		}
		if l.holder >= 0 {
			s.rev++ // the lapsed lease's expiry marker
		}
		s.rev++
		expiry := s.now + s.cfg.Lease.TTL
		if s.cfg.InProgress {
			expiry = forever
		}
		*l = leaseState{holder: wid, token: s.rev, expiry: expiry, written: true}
		w.token = s.rev
	}
	var b int32
	if granted {
		b = 1
	}
	s.events.push(event{at: max(s.now, w.delivered+trips*s.cfg.RoundTrip), kind: evCreateReply, a: wid, b: b})
}

// onCreateReply: the worker works with its lease, or naks the message.
func (s *sim) onCreateReply(wid int32, granted bool) {
	w := &s.workers[wid]
	c := &s.consumers[w.consumer]
	m := w.msg
	if !granted {
		s.rec.LeaseRetry()
		s.nakDelayed(c, m, s.cfg.Lease.Retry)
		s.makeIdle(wid)
		s.dispatch(c)
		return
	}
	w.acquired = s.now
	w.exec = s.rec.BeginFenced(int(m), c.lane, s.now, w.token)
	s.events.push(event{at: s.now + w.work, kind: evEnd, a: wid})
	busy := s.now + w.work - w.delivered
	if !w.crash {
		busy += s.cfg.RoundTrip // the release before the ack
	}
	s.scheduleExpire(m, w.delivered, busy, w.crash)
}

// leaveLease: the worker died holding its lease, which lapses one TTL
// after its last renewal (after it was taken, without in-progress acks).
func (s *sim) leaveLease(wid int32) {
	w := &s.workers[wid]
	l := &s.leases[s.w.Messages[w.msg].Key]
	if l.holder != wid || l.token != w.token || !s.cfg.InProgress {
		return
	}
	last := w.acquired
	if every := s.cfg.Lease.TTL / 3; every > 0 && s.now > w.acquired {
		last += (s.now - w.acquired - 1) / every * every
	}
	l.expiry = last + s.cfg.Lease.TTL
}

// release sends the worker's delete of its lease, after its write.
func (s *sim) release(wid int32) {
	s.events.push(event{at: s.now + s.cfg.RoundTrip/2, kind: evRelease, a: wid})
}

// onRelease: the delete reaches the server; it succeeds only while the
// lease is still the worker's (not lapsed, so not re-taken either).
func (s *sim) onRelease(wid int32) {
	w := &s.workers[wid]
	l := &s.leases[s.w.Messages[w.msg].Key]
	if l.holder == wid && l.token == w.token && s.now < l.expiry {
		l.holder = -1
		s.rev++
	} else {
		s.rec.LeaseLost()
	}
	s.events.push(event{at: s.now + s.cfg.RoundTrip - s.cfg.RoundTrip/2, kind: evReleaseReply, a: wid})
}

// nakedMsg is a message waiting out a nak delay.
type nakedMsg struct {
	m   int32
	d   int32 // its delivery the nak answered
	due time.Duration
}

// nakRecheck is how soon after a delayed nak the server checks the
// consumer's pending messages (nats-server's resetPtmr(10ms) in processNak).
const nakRecheck = 10 * time.Millisecond

// nakDelayed naks message m with a delay: it keeps its slot, and the
// consumer's check is re-armed to run nakRecheck from now.
func (s *sim) nakDelayed(c *consumer, m int32, delay time.Duration) {
	st := &s.msgs[m]
	st.naked = true
	c.naked = append(c.naked, nakedMsg{m: m, d: st.deliveries, due: s.now + delay})
	s.armNakCheck(c, s.now+nakRecheck)
}

func (s *sim) armNakCheck(c *consumer, at time.Duration) {
	c.nakGen++
	c.nakNext = at
	s.events.push(event{at: at, kind: evNakCheck, a: int32(c.lane), b: c.nakGen})
}

// onNakCheck: the consumer's check runs (unless re-armed since): the
// naked messages that are due come back, and it re-arms itself for the
// next one due.
func (s *sim) onNakCheck(cid, gen int32) {
	c := &s.consumers[cid]
	if gen != c.nakGen {
		return
	}
	next := time.Duration(-1)
	keep := c.naked[:0]
	var due []int32
	for _, n := range c.naked {
		st := &s.msgs[n.m]
		switch {
		case st.status != msgPending || st.deliveries != n.d || !st.naked:
			// settled meanwhile
		case n.due <= s.now:
			st.naked = false
			due = append(due, n.m)
		default:
			keep = append(keep, n)
			if next < 0 || n.due < next {
				next = n.due
			}
		}
	}
	c.naked = keep
	for _, m := range due {
		s.redeliver(m)
	}
	if next >= 0 {
		s.armNakCheck(c, next)
	}
}
