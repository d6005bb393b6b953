package converge_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestKeysInFlightChangeIsAnUpdate: on a real server, a lane with a
// backlog, two messages acked and one in flight goes through keys in
// flight 1 -> 8 -> 32 -> 4 -> 1 -> 8 -> 1: each apply updates both lanes
// in place (no delete, no create, the same lane since its creation), its
// max ack pending, tag and pinned group follow K, its position (delivered
// and ack floor) does not move, and the last apply finds nothing to do.
// Under K=8 the server lets a second message out: the change is live;
// back at K=1 with those two out, it lets nothing more out.
func TestKeysInFlightChangeIsAnUpdate(t *testing.T) {
	t.Parallel()
	srv, c, js, p, seqs := laneWithProgress(t)
	log := watchAPI(t, srv.URL())
	lane := p.Consumers[0].Durable
	before := consumerInfo(t, js, p.Stream.Name, lane)
	prev := 1
	for step, k := range []int{8, 32, 4, 1, 8, 1} {
		design := testutil.Seed(2)
		design.Lane.KeysInFlight = k
		log.since(t, c.NC)
		d, res := apply(t, c, testutil.PlanDesign(t, design), converge.Options{})
		if n := d.Counts()[converge.ActionUpdate]; n != 2 || len(d.Lanes) != 2 || d.Refused() {
			t.Fatalf("%d -> %d: %+v, refusals %v", prev, k, d.Counts(), d.Refusals)
		}
		for _, l := range d.Lanes {
			if l.KeysInFlight == nil || l.KeysInFlight.From != prev || l.KeysInFlight.To != k {
				t.Fatalf("%d -> %d: lane %s keys in flight %+v", prev, k, l.Name, l.KeysInFlight)
			}
		}
		if res.Updated != 2 || res.Created != 0 || len(res.Recreated) != 0 || res.Deleted != 0 {
			t.Fatalf("%d -> %d: result %+v", prev, k, res)
		}
		for _, w := range writes(log.since(t, c.NC)) {
			if !strings.HasPrefix(w, "$JS.API.CONSUMER.CREATE."+p.Stream.Name+".") {
				t.Fatalf("%d -> %d: write %s (an update is a CONSUMER.CREATE with action update, nothing else)", prev, k, w)
			}
		}
		got := consumerInfo(t, js, p.Stream.Name, lane)
		cfg := got.Config
		tag, tagged := cfg.Metadata[planner.MetaKeysInFlight]
		switch {
		case cfg.MaxAckPending != k:
			t.Fatalf("%d -> %d: max ack pending %d", prev, k, cfg.MaxAckPending)
		case k == 1 && (tagged || cfg.PriorityPolicy != jetstream.PriorityPolicyNone || len(cfg.PriorityGroups) != 0):
			t.Fatalf("%d -> %d: a serial lane again, yet tag %q, policy %v, groups %v", prev, k, tag, cfg.PriorityPolicy, cfg.PriorityGroups)
		case k > 1 && (tag != strconv.Itoa(k) || cfg.PriorityPolicy != jetstream.PriorityPolicyPinned || len(cfg.PriorityGroups) != 1):
			t.Fatalf("%d -> %d: key-parallel, yet tag %q, policy %v, groups %v", prev, k, tag, cfg.PriorityPolicy, cfg.PriorityGroups)
		case !got.Created.Equal(before.Created):
			t.Fatalf("%d -> %d: the lane was created again (%s, first %s)", prev, k, got.Created, before.Created)
		case got.Delivered.Stream != before.Delivered.Stream || got.Delivered.Consumer != before.Delivered.Consumer ||
			got.AckFloor.Stream != before.AckFloor.Stream || got.AckFloor.Consumer != before.AckFloor.Consumer ||
			got.NumAckPending != before.NumAckPending || got.NumPending != before.NumPending:
			t.Fatalf("%d -> %d: position moved: delivered %+v ack floor %+v out %d pending %d; before %+v %+v %d %d", prev, k,
				got.Delivered, got.AckFloor, got.NumAckPending, got.NumPending, before.Delivered, before.AckFloor, before.NumAckPending, before.NumPending)
		}
		if step == 3 {
			// Back to K=1 with two out: the server takes back neither and
			// lets nothing more out until the lane is below its new cap.
			if got := fetchNoWait(t, js, p.Stream.Name, lane); got != 0 {
				t.Fatalf("under K=1 with 2 out, a pull got %d messages", got)
			}
		}
		if step == 0 || step == 4 {
			// With 8 out allowed, the lane hands out the next message at
			// once, beside those in flight: where it was, one further.
			if step == 4 {
				// nats-server 2.15 keeps the pin it gave the pull of step
				// 0 through the lane's serial spell (K=1, no group), and a
				// pull without that pin waits for the pinned TTL: free it,
				// as lanes work's pin check does.
				st, err := js.Stream(context.Background(), p.Stream.Name)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.UnpinConsumer(context.Background(), lane, planner.PinnedGroup); err != nil {
					t.Fatal(err)
				}
			}
			want := seqs[3+step/4]
			if s := seqOf(t, nextPinned(t, js, p.Stream.Name, lane)); s != want {
				t.Fatalf("under K=8 the next delivery is seq %d, want %d", s, want)
			}
			before = consumerInfo(t, js, p.Stream.Name, lane)
			if before.NumAckPending != 2+step/4 {
				t.Fatalf("want %d out under K=8, got %d", 2+step/4, before.NumAckPending)
			}
		}
		prev = k
	}
	d, res := apply(t, c, testutil.PlanDesign(t, testutil.Seed(2)), converge.Options{})
	if d.Pending() || res.WriteRequests != 0 {
		t.Fatalf("after the round trip: pending %v, %d writes, %+v", d.Pending(), res.WriteRequests, d.Lanes[0].Changes)
	}
}

// TestKeysInFlightOnThisServer: the version gate on a real connection:
// the embedded server (2.15) is new enough, and the diff learned its
// version from the connection.
func TestKeysInFlightOnThisServer(t *testing.T) {
	t.Parallel()
	_, c, _, _, _ := laneWithProgress(t)
	keyed := testutil.Seed(2)
	keyed.Lane.KeysInFlight = 16
	if got := converge.TopologyOf(c).Version; got == "" || strings.Contains(got, " ") {
		t.Fatalf("the connection's server version %q", got)
	}
	d, res := apply(t, c, testutil.PlanDesign(t, keyed), converge.Options{})
	if d.Refused() || res.Updated != 2 {
		t.Fatalf("K=16 on %s: refusals %v, updated %d", converge.TopologyOf(c).Version, d.Refusals, res.Updated)
	}
}

// nextPinned fetches one message from a pinned lane, as lanes work pulls:
// in the lane's priority group.
func nextPinned(t testing.TB, js jetstream.JetStream, stream, lane string) jetstream.Msg {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, lane)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(1, jetstream.FetchMaxWait(3*time.Second), jetstream.FetchPriorityGroup(planner.PinnedGroup))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatalf("no message from %s: %v", lane, b.Error())
	return nil
}

// fetchNoWait pulls what a lane hands out at once, and counts it.
func fetchNoWait(t testing.TB, js jetstream.JetStream, stream, lane string) int {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, lane)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.FetchNoWait(1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range b.Messages() {
		n++
	}
	return n
}

// TestKeysInFlightBackToOneReleasesThePin: nats-server (2.11-2.15) keeps
// a lane's pin through an update that takes its pinned group away, and
// the pulls that no longer name the group then get nothing until the
// pin's TTL (2 minutes here) runs out. Back from K=8 to 1, apply releases
// the pin first: a plain pull gets the lane's next message within seconds.
func TestKeysInFlightBackToOneReleasesThePin(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	keyed := testutil.Seed(1)
	keyed.Lane.KeysInFlight = 8
	p := testutil.PlanDesign(t, keyed)
	apply(t, c, p, converge.Options{})
	seqs := publishSeq(t, js, keysIn(p, 0, 2), 2)
	lane := p.Consumers[0].Durable
	m := nextPinned(t, js, p.Stream.Name, lane) // the lane is pinned to this pull's client
	if err := m.DoubleAck(context.Background()); err != nil {
		t.Fatal(err)
	}
	apply(t, c, testutil.PlanDesign(t, testutil.Seed(1)), converge.Options{})
	testutil.WaitFor(t, "a plain pull to get the next message", 10*time.Second, func() bool {
		cons, err := js.Consumer(context.Background(), p.Stream.Name, lane)
		if err != nil {
			t.Fatal(err)
		}
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if seqOf(t, m) != seqs[1] {
				t.Fatalf("got seq %d, want %d", seqOf(t, m), seqs[1])
			}
			return true
		}
		return false
	})
}
