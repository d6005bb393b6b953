package planner

import "time"

// AckDeadline is how long the server waits for the ack of a lane's
// delivery (attempt, 1-based) before it delivers the message again: the
// backoff step for that delivery when the lane has a backoff (its last
// step for every later one), else the ack wait. In-progress acks restart
// it.
func AckDeadline(ackWait time.Duration, backoff []time.Duration, attempt int) time.Duration {
	if len(backoff) == 0 {
		return ackWait
	}
	return backoff[min(max(attempt-1, 0), len(backoff)-1)]
}

// NakDelay is the delay to put in a -NAK of a lane's delivery (attempt,
// 1-based) for the message to come back after want. nats-server
// (2.11-2.15, consumer.go processNak and checkPending) waits
// delay - ack_wait + backoff[attempt-1] when the lane has a backoff, and
// the delay otherwise; a delay of 0 (a plain -NAK) redelivers at once.
func NakDelay(ackWait time.Duration, backoff []time.Duration, attempt int, want time.Duration) time.Duration {
	if len(backoff) == 0 {
		return want
	}
	return max(want+ackWait-AckDeadline(ackWait, backoff, attempt), 0)
}
