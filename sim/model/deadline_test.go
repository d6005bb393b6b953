package model

import (
	"testing"
	"time"
)

const milli = time.Millisecond

func TestAckWaitFollowsBackoff(t *testing.T) {
	s := &sim{cfg: Config{Lane: Lane{AckWait: 20 * milli, BackOff: []time.Duration{20 * milli, 200 * milli, time.Second}}}}
	for d, want := range map[int32]time.Duration{1: 20 * milli, 2: 200 * milli, 3: time.Second, 9: time.Second} {
		if got := s.ackWait(d); got != want {
			t.Errorf("delivery %d waits %v, want %v", d, got, want)
		}
	}
	s.cfg.Lane.BackOff = nil
	if got := s.ackWait(4); got != 20*milli {
		t.Errorf("without backoff delivery 4 waits %v, want the ack wait", got)
	}
}

func TestDeadline(t *testing.T) {
	s := &sim{now: time.Second, cfg: Config{Lane: Lane{AckWait: 30 * milli}}}
	cases := []struct {
		inProgress bool
		work       time.Duration
		crash      bool
		at         time.Duration
		needed     bool
	}{
		{false, 10 * milli, false, 1030 * milli, false}, // acked in time
		{false, 30 * milli, false, 1030 * milli, false}, // the ack lands on the deadline: in time
		{false, 40 * milli, false, 1030 * milli, true},  // slow: redelivered at the deadline
		{false, 5 * milli, true, 1030 * milli, true},    // crashed: never acked
		{true, 500 * milli, false, 0, false},            // in-progress every 10ms keeps it
		{true, 95 * milli, true, 1120 * milli, true},    // last +WPI at 90ms, then 30ms
		{true, 90 * milli, true, 1110 * milli, true},    // a +WPI due at the crash instant is not sent
		{true, 0, true, 1030 * milli, true},             // died at once
	}
	for _, c := range cases {
		s.cfg.InProgress = c.inProgress
		at, needed := s.deadline(s.now, c.work, c.crash, 1)
		if needed != c.needed || (needed && at != c.at) {
			t.Errorf("%+v: deadline %v needed %v", c, at, needed)
		}
	}
}
