package planner

import (
	"testing"
	"time"
)

// TestNakDelay: with a backoff, the delay sent is corrected so that the
// server's wait (delay - ack_wait + backoff[attempt-1]) is the one wanted;
// without one it is sent as it is.
func TestNakDelay(t *testing.T) {
	const s = time.Second
	backoff := []time.Duration{2 * s, 5 * s, 10 * s}
	for _, c := range []struct {
		ackWait      time.Duration
		backoff      []time.Duration
		attempt      int
		want         time.Duration
		deadline     time.Duration
		send, waited time.Duration
	}{
		{30 * s, nil, 1, 3 * s, 30 * s, 3 * s, 3 * s},
		{30 * s, nil, 7, 0, 30 * s, 0, 0},
		{2 * s, backoff, 1, 3 * s, 2 * s, 3 * s, 3 * s},
		{2 * s, backoff, 2, 8 * s, 5 * s, 5 * s, 8 * s},
		{2 * s, backoff, 3, 12 * s, 10 * s, 4 * s, 12 * s},
		{2 * s, backoff, 9, 12 * s, 10 * s, 4 * s, 12 * s}, // past the last step: the last step
		{2 * s, backoff, 0, 3 * s, 2 * s, 3 * s, 3 * s},    // no attempt counted yet: the first step
		{2 * s, backoff, 3, 5 * s, 10 * s, 0, 0},           // sooner than a delay can say: a plain nak, at once
	} {
		if d := AckDeadline(c.ackWait, c.backoff, c.attempt); d != c.deadline {
			t.Errorf("%+v: deadline %s", c, d)
		}
		send := NakDelay(c.ackWait, c.backoff, c.attempt, c.want)
		waited := send
		if len(c.backoff) > 0 && send > 0 {
			waited = send - c.ackWait + AckDeadline(c.ackWait, c.backoff, c.attempt)
		}
		if send != c.send || waited != c.waited {
			t.Errorf("%+v: sent %s, the server waits %s", c, send, waited)
		}
	}
}
