package work

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
)

// TestServerPinsAGoneRequest records the nats-server behaviour (2.11 to
// 2.15.2) behind key-parallel lanes that stalled for up to the pinned TTL:
// when the pin is free and a message is ready, the server gives a new pin
// to the first waiting request without a pin id before it checks that
// anyone still listens for it. A request whose inbox is gone then takes
// the pin with it, and every live request without the id waits, skipped,
// until the pinned TTL ends (2 minutes by default) or the lane is unpinned
// again. Unpinned while a live request waits, the server walks past the
// gone request and pins the live one: this is why a key-parallel session
// with no delivery unpins again (work/keyed.go, pinPatience and
// idlePinChecks).
func TestServerPinsAGoneRequest(t *testing.T) {
	s := natstest.Start(t)
	nc, js := natstest.Connect(t, s.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	const group = "lane"
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 8, PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{group}, PinnedTTL: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := js.Publish(ctx, "s.a", nil); err != nil {
			t.Fatal(err)
		}
	}
	pull := func(inbox string, pin ...string) {
		t.Helper()
		body := `{"batch":1,"expires":60000000000,"group":"` + group + `"`
		if len(pin) > 0 {
			body += `,"id":"` + pin[0] + `"`
		}
		body += "}"
		if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.S.c", inbox, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(sub *nats.Subscription, within time.Duration) *nats.Msg {
		t.Helper()
		m, err := sub.NextMsg(within)
		if err != nil {
			return nil
		}
		return m
	}
	stream, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	unpin := func() {
		t.Helper()
		if err := stream.UnpinConsumer(ctx, "c", group); err != nil {
			t.Fatal(err)
		}
	}
	info := func() *jetstream.ConsumerInfo {
		t.Helper()
		c, err := stream.Consumer(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ci
	}

	// A first client takes the pin with a delivery. A request without the
	// pin id waits, skipped, as the first request of a lane's session did
	// (it has no pin yet); the first client's next request, sent after
	// it, is served past it, which shows the server has seen both. Then
	// the skipped request's inbox goes.
	first, _ := nc.SubscribeSync(nc.NewInbox())
	pull(first.Subject)
	m := receive(first, 5*time.Second)
	if m == nil || m.Header.Get("Nats-Pin-Id") == "" {
		t.Fatalf("first delivery: %v", m)
	}
	gone, _ := nc.SubscribeSync(nc.NewInbox())
	pull(gone.Subject)
	pull(first.Subject, m.Header.Get("Nats-Pin-Id"))
	if receive(first, 5*time.Second) == nil {
		t.Fatal("no second delivery to the pinned client")
	}
	if err := gone.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Unpinned: the gone request takes the new pin, and no message goes
	// anywhere. A request sent then, without the id, gets nothing.
	pinned, _ := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.PINNED.S.c")
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	unpin()
	if receive(pinned, 5*time.Second) == nil {
		t.Fatal("no new pin after the unpin")
	}
	if ci := info(); ci.Delivered.Consumer != 2 {
		t.Fatalf("delivered %d after the unpin, want 2: the server no longer pins a gone request; the unpins again of work/keyed.go (pinPatience, idlePinChecks) may go", ci.Delivered.Consumer)
	}
	gone2, _ := nc.SubscribeSync(nc.NewInbox())
	pull(gone2.Subject) // another gone request, ahead of the live one
	if err := gone2.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	live, _ := nc.SubscribeSync(nc.NewInbox())
	pull(live.Subject)
	if m := receive(live, time.Second); m != nil {
		t.Fatalf("the live request got %q under a gone request's pin", m.Subject)
	}

	// Unpinned again, with the live request waiting: the server walks past
	// the gone one and pins the live one.
	unpin()
	if m := receive(live, 5*time.Second); m == nil || m.Header.Get("Nats-Pin-Id") == "" {
		t.Fatalf("after an unpin with a live request waiting: %v, want a pinned delivery", m)
	}
}
