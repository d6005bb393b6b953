// Package model predicts how a lane design behaves, offline: a deterministic
// discrete-event simulation of JetStream pull consumers (ack wait, late
// acks, redelivery, max deliver, max ack pending, in-progress acks, backoff,
// pinned workers) fed by a workload and judged by a judge.Recorder, the
// same judge the live run uses. There is no clock and no goroutine: the
// same workload and configuration always give the same result.
package model

import (
	"context"
	"fmt"
	"time"

	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// Lane holds the consumer settings every strategy's consumers use.
type Lane struct {
	AckWait       time.Duration
	BackOff       []time.Duration // when set, delivery d waits BackOff[min(d-1, len-1)]
	MaxDeliver    int             // -1: unlimited
	MaxAckPending int             // the design's (strategies with a lane per partition use it)
	Pinned        bool            // the design's lanes are pinned: one pinned worker receives
	PinnedTTL     time.Duration   // the pin moves this long after the pinned worker stops pulling
	// KeysInFlight above 1 makes the design's lanes key-parallel (see
	// keyed.go); 0 or 1 is a serial lane.
	KeysInFlight int
}

// Config is one model run. Every strategy gets the same total workers,
// Partitions x WorkersPerLane, so comparisons are fair.
type Config struct {
	Strategy       strategy.Strategy
	Partitions     int
	WorkersPerLane int
	// KeyPartition is the partition of each workload key (strategies with
	// a lane per partition).
	KeyPartition []int
	Lane         Lane
	// InProgress: workers send an in-progress ack every AckWait/3 while
	// working (and, with a lease, renew it every TTL/3).
	InProgress bool
	// Lease configures the lease mechanics (the kv-lease strategy).
	Lease strategy.LeaseSettings
	// RoundTrip is what one request to the server and its answer take: the
	// lease mechanics pay one to take a lease and one to release it. The
	// other mechanics are modelled without network time.
	RoundTrip time.Duration
}

// DefaultRoundTrip is a request and its answer between a worker and the
// server in the same data centre. On loopback (the embedded server of
// lanes simulate --live) a KV request takes 30 us on an idle machine and
// 100-150 us with eight workers busy on two cores.
const DefaultRoundTrip = 200 * time.Microsecond

// Params are the strategy parameters of this run.
func (c Config) Params() strategy.Params {
	return strategy.Params{Partitions: c.Partitions, WorkersPerLane: c.WorkersPerLane,
		MaxAckPending: c.Lane.MaxAckPending, Pinned: c.Lane.Pinned, KeysInFlight: c.Lane.KeysInFlight}
}

func (c Config) validate(w *workload.Workload) error {
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("model: partitions must be at least 1")
	case c.WorkersPerLane < 1:
		return fmt.Errorf("model: workers per lane must be at least 1")
	case c.Lane.AckWait <= 0:
		return fmt.Errorf("model: ack wait must be positive")
	case c.Lane.MaxDeliver == 0 || c.Lane.MaxDeliver < -1:
		return fmt.Errorf("model: max deliver must be -1 or at least 1")
	case c.Lane.Pinned && c.Lane.PinnedTTL <= 0:
		return fmt.Errorf("model: a pinned lane needs a positive pinned TTL")
	case c.Lane.KeysInFlight < 0:
		return fmt.Errorf("model: keys in flight cannot be negative")
	}
	switch c.Strategy.Model {
	case strategy.Pull:
	case strategy.Lease:
		switch {
		case c.Lease.TTL <= 0:
			return fmt.Errorf("model: the lease TTL must be positive")
		case c.Lease.Retry <= 0:
			return fmt.Errorf("model: the lease retry delay must be positive")
		case c.RoundTrip < 0:
			return fmt.Errorf("model: the round trip cannot be negative")
		}
	default:
		return fmt.Errorf("model: strategy %q has mechanics %q the model does not know", c.Strategy.Name, c.Strategy.Model)
	}
	sh := c.Strategy.Shape(c.Params())
	if sh.MaxAckPending < 1 {
		return fmt.Errorf("model: max ack pending must be at least 1")
	}
	if sh.KeyParallel() && c.Strategy.Model != strategy.Pull {
		return fmt.Errorf("model: key-parallel lanes need the pull mechanics, not %q", c.Strategy.Model)
	}
	if sh.ByPartition {
		if len(c.KeyPartition) != len(w.Spec.Keys.Names) {
			return fmt.Errorf("model: %d key partitions for %d keys", len(c.KeyPartition), len(w.Spec.Keys.Names))
		}
		for k, p := range c.KeyPartition {
			if p < 0 || p >= c.Partitions {
				return fmt.Errorf("model: key %q in partition %d of %d", w.Spec.Keys.Names[k], p, c.Partitions)
			}
		}
	}
	return nil
}

// Run simulates the workload under one strategy until every message is
// acked or dropped, and returns the recorder's judgement.
func Run(ctx context.Context, w *workload.Workload, cfg Config) (judge.Result, error) {
	if err := cfg.validate(w); err != nil {
		return judge.Result{}, err
	}
	s := newSim(w, cfg)
	if err := s.run(ctx); err != nil {
		return judge.Result{}, err
	}
	return s.rec.Result(), nil
}

// Message states, as the consumer sees them.
const (
	msgWaiting uint8 = iota // not delivered yet
	msgPending              // delivered, not acked: holds a MaxAckPending slot
	msgAcked
	msgDropped // used up max deliver
)

type msgState struct {
	deliveries int32
	status     uint8
	exhausted  bool // max deliver used up: dropped at the consumer's next pull
	naked      bool // waiting out a nak delay (kv-lease: its key was leased)
}

type worker struct {
	consumer int32
	alive    bool
	idle     bool
	crash    bool // the current attempt ends in a crash
	msg      int32
	exec     judge.Exec
	// The lease mechanics' (see lease.go): when the message was delivered,
	// the attempt's work, the lease's token and when it was taken.
	delivered, work, acquired time.Duration
	token                     uint64
}

type consumer struct {
	lane          int     // index reported to the recorder, and in s.consumers
	msgs          []int32 // its messages, in publish order
	next          int     // position of the next message never delivered
	pending       int     // delivered and not yet acked or dropped
	maxAckPending int
	rdq           []int32 // due for redelivery, by message index (the server sorts by sequence)
	idle          []int32 // idle workers waiting with a pull, first come first served
	idleHead      int
	pinned        int32 // the pinned worker; -1: the next worker to pull gets the pin
	waking        bool  // an arrival event is scheduled
	// keyed: a key-parallel lane, its deliveries gated per key (keyed.go).
	keyed bool
	// Delayed naks (the lease mechanics): the messages waiting out their
	// delay, and the server's check of them (see lease.go, onNakCheck).
	naked   []nakedMsg
	nakGen  int32 // the current check's generation: older ones are void
	nakNext time.Duration
}

type sim struct {
	w         *workload.Workload
	cfg       Config
	rec       *judge.Recorder
	now       time.Duration
	events    eventHeap
	consumers []consumer
	workers   []worker
	msgs      []msgState
	pinning   bool
	// byPartition: messages go to their key's partition's consumer.
	byPartition bool
	// leasing: the lease mechanics (lease.go), with a lease per key.
	leasing bool
	leases  []leaseState
	rev     uint64 // the lease bucket's last revision
	// keys: per key, the key gate of key-parallel lanes (keyed.go); nil
	// for serial lanes.
	keys []keyGate
}

func newSim(w *workload.Workload, cfg Config) *sim {
	sh := cfg.Strategy.Shape(cfg.Params())
	s := &sim{w: w, cfg: cfg, msgs: make([]msgState, len(w.Messages)), rec: cfg.Strategy.Recorder(w, cfg.Params(), cfg.KeyPartition),
		pinning: sh.Pinned, byPartition: sh.ByPartition, leasing: cfg.Strategy.Model == strategy.Lease}
	if s.leasing {
		s.leases = make([]leaseState, len(w.Spec.Keys.Names))
		for k := range s.leases {
			s.leases[k].holder = -1
		}
	}
	s.consumers = make([]consumer, sh.Consumers)
	for i := range s.consumers {
		s.consumers[i] = consumer{lane: i, maxAckPending: sh.MaxAckPending, pinned: -1, keyed: sh.KeyParallel()}
	}
	if sh.KeyParallel() {
		s.keys = newKeyGates(len(w.Spec.Keys.Names))
	}
	if !sh.ByPartition {
		all := make([]int32, len(w.Messages))
		for i := range all {
			all[i] = int32(i)
		}
		s.consumers[0].msgs = all
	} else {
		for i, m := range w.Messages {
			c := &s.consumers[cfg.KeyPartition[m.Key]]
			c.msgs = append(c.msgs, int32(i))
		}
	}
	for i := range s.consumers {
		s.addWorkers(i, sh.WorkersEach)
	}
	return s
}

func (s *sim) addWorkers(c, n int) {
	for range n {
		s.workers = append(s.workers, worker{consumer: int32(c), alive: true})
		s.makeIdle(int32(len(s.workers) - 1))
	}
}

func (s *sim) run(ctx context.Context) error {
	for i := range s.consumers {
		s.dispatch(&s.consumers[i])
	}
	for n := 0; s.events.len() > 0; n++ {
		if n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e := s.events.pop()
		s.now = e.at
		switch e.kind {
		case evEnd:
			s.onEnd(e.a)
		case evKeyEnd:
			s.onKeyEnd(e.a)
		case evExpire:
			s.onExpire(e.a, e.b)
		case evArrive:
			c := &s.consumers[e.a]
			c.waking = false
			s.dispatch(c)
		case evPinMove:
			c := &s.consumers[e.a]
			c.pinned = -1
			s.dispatch(c)
		case evCreate:
			s.onCreate(e.a)
		case evCreateReply:
			s.onCreateReply(e.a, e.b == 1)
		case evRelease:
			s.onRelease(e.a)
		case evReleaseReply:
			s.ack(e.a)
		case evNakCheck:
			s.onNakCheck(e.a, e.b)
		}
	}
	return nil
}

// dispatch hands messages to idle workers for as long as the consumer has
// both: a worker with a pull waiting, and a message it may deliver.
func (s *sim) dispatch(c *consumer) {
	if c.keyed {
		s.dispatchKeyed(c)
		return
	}
	for {
		wid, fromQueue := s.peekIdle(c)
		if wid < 0 {
			return
		}
		m := s.take(c)
		if m < 0 {
			return
		}
		if fromQueue {
			c.idleHead++
			s.compactIdle(c)
		}
		if s.pinning && c.pinned < 0 {
			c.pinned = wid // the first worker to receive holds the pin
		}
		s.deliver(c, wid, m)
	}
}

// peekIdle finds the worker the next delivery goes to, without taking it:
// with a pin, only the pinned worker receives; otherwise the longest waiting.
func (s *sim) peekIdle(c *consumer) (int32, bool) {
	if s.pinning && c.pinned >= 0 {
		w := &s.workers[c.pinned]
		if w.alive && w.idle {
			return c.pinned, false
		}
		return -1, false // pinned worker busy, or dead until the pin moves
	}
	for c.idleHead < len(c.idle) {
		id := c.idle[c.idleHead]
		if w := &s.workers[id]; w.alive && w.idle {
			return id, true
		}
		c.idleHead++
	}
	return -1, false
}

func (s *sim) compactIdle(c *consumer) {
	if c.idleHead > 64 && c.idleHead*2 > len(c.idle) {
		n := copy(c.idle, c.idle[c.idleHead:])
		c.idle, c.idleHead = c.idle[:n], 0
	}
}

func (s *sim) makeIdle(wid int32) {
	w := &s.workers[wid]
	w.idle = true
	c := &s.consumers[w.consumer]
	if s.pinning && c.pinned == wid {
		return // found by the pin, not the queue
	}
	c.idle = append(c.idle, wid)
}

// take picks what the consumer delivers next, as the server does on a pull:
// redeliveries first (dropping those that used up max deliver: the lazy
// enforcement), then the next new message if a MaxAckPending slot is free
// and it has been published. It returns -1 when there is nothing to deliver.
func (s *sim) take(c *consumer) int32 {
	for len(c.rdq) > 0 {
		m := c.rdq[0]
		c.rdq = append(c.rdq[:0], c.rdq[1:]...)
		st := &s.msgs[m]
		if st.status != msgPending {
			continue // acked (late) while it waited
		}
		if st.exhausted {
			st.status = msgDropped
			c.pending--
			if c.keyed {
				s.dropped(m)
			}
			continue
		}
		return m
	}
	if c.pending >= c.maxAckPending || c.next >= len(c.msgs) {
		return -1
	}
	m := c.msgs[c.next]
	if at := s.w.Messages[m].At; at > s.now {
		if !c.waking {
			c.waking = true
			s.events.push(event{at: at, kind: evArrive, a: int32(c.lane)})
		}
		return -1
	}
	c.next++
	c.pending++
	s.msgs[m].status = msgPending
	return m
}

// deliver starts one attempt: the workload decides how long it works and
// whether it crashes; the ack-wait deadline is scheduled only when the ack
// will not beat it, which keeps the event heap small.
func (s *sim) deliver(c *consumer, wid, m int32) {
	st := &s.msgs[m]
	st.deliveries++
	work, crash := s.w.Attempt(int(m), int(st.deliveries))
	w := &s.workers[wid]
	w.idle, w.msg, w.crash = false, m, crash
	if s.leasing {
		w.delivered, w.work = s.now, work
		s.askLease(wid)
		return
	}
	w.exec = s.rec.Begin(int(m), c.lane, s.now)
	s.events.push(event{at: s.now + work, kind: evEnd, a: wid})
	s.scheduleExpire(m, s.now, work, crash)
}

// scheduleExpire schedules the ack-wait deadline of the message's current
// delivery, made at start, whose worker holds it for busy before its ack
// (or its crash), only when the ack will not beat it.
func (s *sim) scheduleExpire(m int32, start, busy time.Duration, crash bool) {
	d := s.msgs[m].deliveries
	if at, ok := s.deadline(start, busy, crash, d); ok {
		s.events.push(event{at: at, kind: evExpire, a: m, b: d})
	}
}

// deadline is when delivery d of an attempt starting at start stops being
// protected by its ack wait, and whether that happens before its ack.
func (s *sim) deadline(start, work time.Duration, crash bool, d int32) (time.Duration, bool) {
	wait := s.ackWait(d)
	if s.cfg.InProgress {
		// +WPI every AckWait/3 restarts the clock: while the worker lives it
		// keeps the message, and the clock runs out one wait after its last
		// in-progress ack before a crash.
		if every := s.cfg.Lane.AckWait / 3; every > 0 && every < wait {
			if !crash {
				return 0, false
			}
			last := start
			if work > 0 {
				last += (work - 1) / every * every
			}
			return last + wait, true
		}
	}
	at := start + wait
	return at, crash || start+work > at
}

// ackWait is the wait after delivery d: the backoff step when set.
func (s *sim) ackWait(d int32) time.Duration {
	if b := s.cfg.Lane.BackOff; len(b) > 0 {
		return b[min(int(d)-1, len(b)-1)]
	}
	return s.cfg.Lane.AckWait
}

func (s *sim) onEnd(wid int32) {
	w := &s.workers[wid]
	cid := w.consumer
	c := &s.consumers[cid]
	if w.crash {
		s.rec.End(w.exec, s.now, judge.Crashed)
		if s.leasing {
			s.leaveLease(wid)
		}
		w.alive = false
		if s.pinning && c.pinned == wid {
			// Nobody else receives until the pin times out.
			s.events.push(event{at: s.now + s.cfg.Lane.PinnedTTL, kind: evPinMove, a: cid})
		}
		s.addWorkers(int(cid), 1) // replaced at once by a fresh worker (w is stale after this)
		s.dispatch(c)
		return
	}
	s.rec.End(w.exec, s.now, judge.Done)
	if s.leasing {
		s.release(wid) // then the ack
		return
	}
	s.ack(wid)
}

// ack acknowledges the worker's message; the worker pulls again.
func (s *sim) ack(wid int32) {
	w := &s.workers[wid]
	c := &s.consumers[w.consumer]
	if st := &s.msgs[w.msg]; st.status == msgPending {
		// Acks are accepted late, even while a redelivered copy is running:
		// the lane moves on, which is how duplicates and overlaps arise.
		st.status = msgAcked
		c.pending--
	}
	s.makeIdle(wid)
	s.dispatch(c)
}

func (s *sim) onExpire(m, d int32) {
	st := &s.msgs[m]
	if st.status != msgPending || st.deliveries != d || st.naked {
		return // acked in the meantime, or naked (its own due time)
	}
	s.redeliver(m)
}

// redeliver makes message m due for redelivery by its consumer (dropped at
// the next pull when it used up max deliver).
func (s *sim) redeliver(m int32) {
	st := &s.msgs[m]
	if md := s.cfg.Lane.MaxDeliver; md > 0 && int(st.deliveries) >= md {
		st.exhausted = true
	}
	c := s.consumerOf(m)
	i := len(c.rdq)
	for i > 0 && c.rdq[i-1] > m {
		i--
	}
	c.rdq = append(c.rdq, 0)
	copy(c.rdq[i+1:], c.rdq[i:])
	c.rdq[i] = m
	s.dispatch(c)
}

func (s *sim) consumerOf(m int32) *consumer {
	if s.byPartition {
		return &s.consumers[s.cfg.KeyPartition[s.w.Messages[m].Key]]
	}
	return &s.consumers[0]
}
