package membership

import (
	"context"
	"testing"
	"time"
)

func TestFenceStanding(t *testing.T) {
	f := NewFence(2 * time.Second)
	if got := f.Check(""); got != Lapsed {
		t.Errorf("before any join: %v, want lapsed", got)
	}
	f.begin("e1", time.Now(), 2*time.Second)
	e1, lapsed1 := f.Current()
	_, ended1 := f.CurrentContext()
	if e1 != "e1" || !f.Holds("e1") || f.Holds("e0") {
		t.Fatalf("after begin: epoch %q, holds e1 %v", e1, f.Holds("e1"))
	}
	// A renewal sent now keeps the epoch past its first lease.
	time.Sleep(100 * time.Millisecond)
	f.extend("e1", time.Now(), 2*time.Second)
	if !f.Holds("e1") {
		t.Fatal("a renewed epoch lapsed")
	}
	f.leave()
	if got := f.Check("e1"); got != Left {
		t.Errorf("after leave: %v, want left", got)
	}
	f.begin("e2", time.Now(), 2*time.Second)
	if f.Check("e1") != Lapsed || !f.Holds("e2") {
		t.Errorf("a new epoch: e1 %v, e2 %v", f.Check("e1"), f.Check("e2"))
	}
	select {
	case <-lapsed1:
		t.Error("begin closed the old epoch's lapsed channel: lanes of e1 would take it for a lapse")
	default:
	}
	if ended1.Err() != nil {
		t.Error("begin ended the old epoch's context")
	}
	_, lapsed2 := f.Current()
	e2, ended2 := f.CurrentContext()
	ran := make(chan struct{})
	context.AfterFunc(ended2, func() { close(ran) })
	f.lose()
	select {
	case <-lapsed2:
	default:
		t.Fatal("lose did not end the epoch")
	}
	if e2 != "e2" || ended2.Err() == nil {
		t.Fatalf("lose did not end the epoch's context (%q)", e2)
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a function waiting on the epoch's context did not run at the lapse")
	}
	if f.Holds("e2") {
		t.Error("a lost epoch still holds")
	}
	f.extend("e2", time.Now(), 2*time.Second)
	if f.Holds("e2") {
		t.Error("a renewal confirmed after the loss revived the epoch")
	}

	// With no renewal, the epoch lapses on its own a margin before the
	// lease: its lanes stop before the key can expire. The standing is
	// judged on the clock, whenever the timer that closes the channel
	// fires (late on a busy machine).
	sent := time.Now()
	f.begin("e3", sent, 2*time.Second)
	_, lapsed3 := f.Current()
	_, ended3 := f.CurrentContext()
	if !f.Holds("e3") {
		t.Fatal("a fresh epoch does not hold")
	}
	for time.Since(sent) < 2*time.Second-f.Margin() {
		time.Sleep(10 * time.Millisecond)
	}
	if f.Check("e3") != Lapsed {
		t.Errorf("%s after the renewal, a margin before the 2s lease, the epoch still holds", time.Since(sent))
	}
	select {
	case <-lapsed3:
	case <-time.After(5 * time.Second):
		t.Fatal("an unrenewed epoch's channel did not close")
	}
	if ended3.Err() == nil {
		t.Error("the lapse closed the epoch's channel, but did not end its context")
	}
}

func TestMayTake(t *testing.T) {
	members := map[string]string{"a": "ea", "b": "eb2", "old": ""}
	for _, tc := range []struct {
		name   string
		rec    *LaneServer
		ok     bool
		holder string
	}{
		{"no record", nil, true, ""},
		{"handed over", &LaneServer{Instance: "a", Epoch: "ea", Released: true}, true, ""},
		{"own record", &LaneServer{Instance: "self", Epoch: "old-epoch"}, true, ""},
		{"held by a live member", &LaneServer{Instance: "a", Epoch: "ea"}, false, "a"},
		{"holder gone", &LaneServer{Instance: "c", Epoch: "ec"}, true, ""},
		{"holder joined again since", &LaneServer{Instance: "b", Epoch: "eb1"}, true, ""},
		{"an older lanes work, live", &LaneServer{Instance: "old"}, false, "old"},
		{"an older lanes work's record, holder now current", &LaneServer{Instance: "a"}, false, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, holder := MayTake(tc.rec, "self", members)
			if ok != tc.ok || holder != tc.holder {
				t.Errorf("mayTake = %v, %q; want %v, %q", ok, holder, tc.ok, tc.holder)
			}
		})
	}
}
