package work

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestNudgerOneAtATime: a lane waiting on its inbox is woken by one nil
// message however many signals come, woken again once it took that one,
// and a full inbox is never blocked on (nor given a nudge it has no room
// for: the server's messages come first).
func TestNudgerOneAtATime(t *testing.T) {
	n := &nudger{ch: make(chan *nats.Msg, 3)}
	for range 5 {
		n.nudge()
	}
	if got := len(n.ch); got != 1 {
		t.Fatalf("5 signals left %d nudges in the inbox, want 1", got)
	}
	if m := <-n.ch; m != nil {
		t.Fatalf("the nudge is %v, want nil", m)
	}
	n.nudge()
	if got := len(n.ch); got != 0 {
		t.Fatal("nudged again before the lane said it woke")
	}
	n.woke()
	n.nudge()
	if got := len(n.ch); got != 1 {
		t.Fatalf("after woke, a signal left %d nudges, want 1", got)
	}
	<-n.ch
	n.woke()

	for range cap(n.ch) {
		n.ch <- &nats.Msg{Subject: "x"}
	}
	n.nudge() // must not block
	if n.pending.Load() {
		t.Error("a nudge the full inbox had no room for is still pending: no later signal would wake the lane")
	}
	for range cap(n.ch) {
		if m := <-n.ch; m == nil {
			t.Fatal("a full inbox got a nudge in place of a message")
		}
	}
	n.nudge()
	if m := <-n.ch; m != nil {
		t.Fatal("no nudge once the inbox had room again")
	}
}
