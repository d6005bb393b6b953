package converge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// keysIn returns n keys that land in partition part.
func keysIn(p *planner.Plan, part, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("user%d", i)
		if l, _ := p.LaneOf("msgs.received_from." + k); l.Partition == part {
			out = append(out, k)
		}
	}
	return out
}

// publishSeq publishes body i to the keys in turn and returns the stream
// sequence of each message.
func publishSeq(t testing.TB, js jetstream.JetStream, keys []string, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := 0; i < n; i++ {
		ack, err := js.Publish(context.Background(), "msgs.received_from."+keys[i%len(keys)], []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

// next fetches one message from a lane.
func next(t testing.TB, js jetstream.JetStream, stream, lane string) jetstream.Msg {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, lane)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatalf("no message from %s: %v", lane, b.Error())
	return nil
}

func seqOf(t testing.TB, m jetstream.Msg) uint64 {
	t.Helper()
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.Sequence.Stream
}

// laneWithProgress applies a 2-lane design, publishes 6 messages to lane
// 0, acks two and leaves the third in flight.
func laneWithProgress(t *testing.T) (*natstest.Server, *connect.Conn, jetstream.JetStream, *planner.Plan, []uint64) {
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := mustPlan(t, design(2))
	apply(t, c, p, converge.Options{})
	seqs := publishSeq(t, js, keysIn(p, 0, 3), 6)
	lane := p.Consumers[0].Durable
	for i := 0; i < 2; i++ {
		m := next(t, js, p.Stream.Name, lane)
		if err := m.DoubleAck(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := seqOf(t, next(t, js, p.Stream.Name, lane)); got != seqs[2] {
		t.Fatalf("third delivery is seq %d, want %d", got, seqs[2])
	}
	return srv, c, js, p, seqs
}

// TestRecreateKeepsPosition: with --recreate, an immutable change deletes
// and recreates the lane after its ack floor: the in-flight message comes
// again, then the rest, and nothing acked is delivered twice.
func TestRecreateKeepsPosition(t *testing.T) {
	_, c, js, p, seqs := laneWithProgress(t)
	lane := p.Consumers[0].Durable
	changed := design(2)
	changed.Lane.MaxWaiting = 64

	d, res := apply(t, c, mustPlan(t, changed), converge.Options{Recreate: true})
	if d.Lanes[0].Action != converge.ActionRecreate || len(res.Recreated) != 2 {
		t.Fatalf("actions %+v, recreated %+v", d.Counts(), res.Recreated)
	}
	var got converge.Position
	for _, r := range res.Recreated {
		if r.Lane == lane {
			got = r.Position
		}
	}
	if got.StartSeq != seqs[2] || got.RedeliverFrom != seqs[2] || got.RedeliverTo != seqs[2] || got.InFlight != 1 {
		t.Fatalf("position %+v, want start and redelivery at %d", got, seqs[2])
	}
	info := consumerInfo(t, js, p.Stream.Name, lane)
	if info.Config.MaxWaiting != 64 || info.Config.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || info.Config.OptStartSeq != seqs[2] {
		t.Fatalf("recreated lane config %+v", info.Config)
	}
	for _, want := range seqs[2:] {
		m := next(t, js, p.Stream.Name, lane)
		if s := seqOf(t, m); s != want {
			t.Fatalf("after recreate got seq %d, want %d", s, want)
		}
		m.Ack()
	}
	assertNoPlaceholders(t, js, p.Stream.Name)
	d, _ = apply(t, c, mustPlan(t, changed), converge.Options{})
	if d.Pending() {
		t.Fatalf("a recreated lane must compare as designed: %+v", d.Lanes[0].Changes)
	}
}

func assertNoPlaceholders(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	names := s.ConsumerNames(context.Background())
	for n := range names.Name() {
		if strings.HasSuffix(n, "-recreate") {
			t.Fatalf("recreate record %s left behind", n)
		}
	}
}

// TestRecreateInterrupted cancels apply as soon as it deletes the lane
// (the create may or may not have been sent), then re-runs apply without
// --recreate: it finds the record and finishes at the same position.
func TestRecreateInterrupted(t *testing.T) {
	srv, c, js, p, seqs := laneWithProgress(t)
	lane := p.Consumers[0].Durable
	changed := design(2)
	changed.Lane.MaxWaiting = 64
	p2 := mustPlan(t, changed)

	ctx, cancel := context.WithCancel(context.Background())
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, _ := nc.Subscribe("$JS.API.CONSUMER.DELETE."+p.Stream.Name+"."+lane, func(*nats.Msg) { cancel() })
	nc.Flush()
	_, _, err = converge.Apply(ctx, c, p2, converge.Options{Recreate: true, Concurrency: 1})
	sub.Unsubscribe()
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Logf("interrupted apply returned %v (the cancel may land after the last step)", err)
	}

	// The lane may now be missing, with its record: a plain apply finishes.
	d, _ := apply(t, c, p2, converge.Options{Recreate: true})
	t.Logf("re-run actions: %+v", d.Counts())
	info := consumerInfo(t, js, p.Stream.Name, lane)
	if info.Config.MaxWaiting != 64 {
		t.Fatalf("lane not converged: %+v", info.Config)
	}
	t.Logf("lane after the re-run: paused=%v deliver=%v start=%d pending=%d ackpending=%d delivered=%+v floor=%+v", info.Paused, info.Config.DeliverPolicy, info.Config.OptStartSeq, info.NumPending, info.NumAckPending, info.Delivered, info.AckFloor)
	if s := seqOf(t, next(t, js, p.Stream.Name, lane)); s != seqs[2] {
		t.Fatalf("after the interrupted recreate the lane delivers %d, want %d (position lost)", s, seqs[2])
	}
	assertNoPlaceholders(t, js, p.Stream.Name)
}

// TestRecreateFinishFromRecord builds the state a kill -9 leaves right
// after the delete (the record and no lane) and checks that apply, with no
// flag, recreates the lane at the recorded position.
func TestRecreateFinishFromRecord(t *testing.T) {
	_, c, js, p, seqs := laneWithProgress(t)
	lane := p.Consumers[0].Durable
	ctx := context.Background()
	if _, err := js.CreateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{
		Durable: lane + "-recreate", FilterSubject: p.Consumers[0].FilterSubject + ".lanes-recreate", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		Metadata: map[string]string{converge.MetaRecreateLane: lane, converge.MetaRecreateDesign: "orders",
			converge.MetaRecreateStartSeq: fmt.Sprint(seqs[2])},
	}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, p.Stream.Name, lane); err != nil {
		t.Fatal(err)
	}
	d, _ := apply(t, c, p, converge.Options{})
	if d.Lanes[0].Action != converge.ActionFinish {
		t.Fatalf("want finish, got %s", d.Lanes[0].Action)
	}
	if s := seqOf(t, next(t, js, p.Stream.Name, lane)); s != seqs[2] {
		t.Fatalf("finished lane delivers %d, want %d", s, seqs[2])
	}
	assertNoPlaceholders(t, js, p.Stream.Name)
}
