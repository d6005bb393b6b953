package health

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
)

// A lane's head is looked up from its ack floor + 1, but never before the
// lane's start: a cluster reports ack floor 0 for a lane created at a
// start sequence until its first ack, and a lane of a returning
// generation (8 -> 16 -> 8) has the old generation's processed messages
// on its filter before its start.
func TestHeadLookupStartsAtTheLanesStart(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(2))
	var sc jetstream.StreamConfig
	natstest.Convert(t, p.Stream, &sc)
	s := &Snapshot{Stream: p.Stream.Name, Info: &jetstream.StreamInfo{Config: sc}, Consumers: jsapi.Empty()}
	for i, c := range p.Consumers {
		var cc jetstream.ConsumerConfig
		natstest.Convert(t, c, &cc)
		ci := &jetstream.ConsumerInfo{Stream: p.Stream.Name, Name: cc.Durable, Config: cc, NumPending: 3}
		switch i {
		case 0: // created at 500 in a cluster, nothing acked yet
			ci.Config.DeliverPolicy, ci.Config.OptStartSeq = jetstream.DeliverByStartSequencePolicy, 500
		case 1: // acked beyond its start
			ci.Config.DeliverPolicy, ci.Config.OptStartSeq = jetstream.DeliverByStartSequencePolicy, 500
			ci.AckFloor.Stream = 620
		}
		s.Consumers.Consumers = append(s.Consumers.Consumers, ci)
	}
	heads, _ := survey(s, Options{Stream: p.Stream.Name, Plan: p})
	got := map[string]uint64{}
	for _, h := range heads {
		got[h.lane] = h.from
	}
	if got["orders-n2-00"] != 500 || got["orders-n2-01"] != 621 || len(got) != 2 {
		t.Errorf("head lookups from %v, want orders-n2-00 from 500, orders-n2-01 from 621", got)
	}
}
