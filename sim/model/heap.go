package model

import "time"

// Event kinds, in the order they run when they fall on the same instant:
// a worker's ack lands before an ack-wait deadline at the same time (the
// server only redelivers once the deadline has passed), and both before
// arrivals and pin moves, which only hand out more work. Of the lease
// requests, a release reaching the server goes before a create at the
// same instant.
const (
	evEnd          uint8 = iota // a worker finishes or crashes
	evKeyEnd                    // a key-parallel lane's handler finishes or fails
	evExpire                    // an ack-wait deadline passes
	evRelease                   // a lease release reaches the server
	evReleaseReply              // its answer reaches the worker, which acks
	evCreate                    // a lease create reaches the server
	evCreateReply               // its answer reaches the worker
	evNakCheck                  // the server checks a consumer's delayed naks
	evArrive                    // the next message of a consumer is published
	evPinMove                   // a dead pinned worker's pin times out
)

type event struct {
	at   time.Duration
	kind uint8
	seq  uint64 // insertion order: ties are broken the same way every run
	a, b int32  // worker, or message and delivery, or consumer
}

func (e event) before(o event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	if e.kind != o.kind {
		return e.kind < o.kind
	}
	return e.seq < o.seq
}

// eventHeap is a binary min-heap of values: no interface boxing, so a push
// does not allocate once the slice has grown. Its size is bounded by the
// number of workers and consumers, not by the number of messages.
type eventHeap struct {
	items []event
	seq   uint64
}

func (h *eventHeap) len() int { return len(h.items) }

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.items = append(h.items, e)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].before(h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.items[l].before(h.items[m]) {
			m = l
		}
		if r < last && h.items[r].before(h.items[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}
