package converge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
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
	return laneWithProgressOf(t, testutil.Seed(2))
}

// TestRecreateKeepsPosition: with --recreate, an immutable change deletes
// and recreates the lane after its ack floor: the in-flight message comes
// again, then the rest, and nothing acked is delivered twice.
func TestRecreateKeepsPosition(t *testing.T) {
	_, c, js, p, seqs := laneWithProgress(t)
	lane := p.Consumers[0].Durable
	changed := testutil.Seed(2)
	changed.Lane.MaxWaiting = 64

	d, res := apply(t, c, testutil.PlanDesign(t, changed), converge.Options{Recreate: true})
	if d.Lanes[0].Action != converge.ActionRecreate || len(res.Recreated) != 2 {
		t.Fatalf("actions %+v, recreated %+v", d.Counts(), res.Recreated)
	}
	var got converge.Position
	for _, r := range res.Recreated {
		if r.Lane == lane {
			got = r.Position
		}
	}
	if got.StartSeq != seqs[2] || !slices.Equal(got.Redelivered, []uint64{seqs[2]}) || got.InFlight != 1 {
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
	d, _ = apply(t, c, testutil.PlanDesign(t, changed), converge.Options{})
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
	changed := testutil.Seed(2)
	changed.Lane.MaxWaiting = 64
	p2 := testutil.PlanDesign(t, changed)

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
		Metadata: map[string]string{planner.MetaRecreateLane: lane, planner.MetaRecreateDesign: "orders",
			planner.MetaRecreateStartSeq: fmt.Sprint(seqs[2])},
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

// laneWithProgressOf is laneWithProgress for any two-lane design.
func laneWithProgressOf(t *testing.T, d planner.Design) (*natstest.Server, *connect.Conn, jetstream.JetStream, *planner.Plan, []uint64) {
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, d)
	apply(t, c, p, converge.Options{})
	seqs := publishSeq(t, js, keysIn(p, 0, 3), 6)
	lane := p.Consumers[0].Durable
	for i := 0; i < 2; i++ {
		if err := next(t, js, p.Stream.Name, lane).DoubleAck(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := seqOf(t, next(t, js, p.Stream.Name, lane)); got != seqs[2] {
		t.Fatalf("third delivery is seq %d, want %d", got, seqs[2])
	}
	return srv, c, js, p, seqs
}

// TestRecreateWorkQueue: on a workqueue stream the server refuses any
// consumer that does not deliver all; acked messages are gone, so a lane
// recreated with deliver all starts right after its ack floor. The
// in-flight message comes again, then the rest.
func TestRecreateWorkQueue(t *testing.T) {
	d := testutil.Seed(2)
	d.Stream.Retention = "workqueue"
	_, c, js, p, seqs := laneWithProgressOf(t, d)
	lane := p.Consumers[0].Durable
	d.Lane.MaxWaiting = 64
	_, res := apply(t, c, testutil.PlanDesign(t, d), converge.Options{Recreate: true})
	if len(res.Recreated) != 2 {
		t.Fatalf("recreated %+v", res.Recreated)
	}
	info := consumerInfo(t, js, p.Stream.Name, lane)
	if info.Config.MaxWaiting != 64 || info.Config.DeliverPolicy != jetstream.DeliverAllPolicy {
		t.Fatalf("recreated lane config %+v", info.Config)
	}
	for _, want := range seqs[2:] {
		m := next(t, js, p.Stream.Name, lane)
		if s := seqOf(t, m); s != want {
			t.Fatalf("after recreate got seq %d, want %d", s, want)
		}
		m.DoubleAck(context.Background())
	}
	assertNoPlaceholders(t, js, p.Stream.Name)
	if d, _ := apply(t, c, testutil.PlanDesign(t, d), converge.Options{}); d.Pending() {
		t.Fatalf("not converged: %+v", d.Counts())
	}
}

// cancelOn cancels ctx when the server sees the n-th request whose
// subject is exactly subject.
func cancelOn(t *testing.T, url, subject string, cancel func()) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var once sync.Once
	if _, err := nc.Subscribe(subject, func(*nats.Msg) { once.Do(cancel) }); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
}

// TestInterruptedRecreateFinishedWithoutFlag: a --recreate of three lanes
// is interrupted right after it deleted the first; a plain apply (no
// --recreate) finishes the recreate it interrupted: every lane is back,
// as designed, and the first at its recorded position.
func TestInterruptedRecreateFinishedWithoutFlag(t *testing.T) {
	srv, c, js, p, seqs := laneWithProgress(t)
	lane := p.Consumers[0].Durable
	changed := testutil.Seed(2)
	changed.Lane.MaxWaiting = 64
	p2 := testutil.PlanDesign(t, changed)

	ctx, cancel := context.WithCancel(context.Background())
	cancelOn(t, srv.URL(), "$JS.API.CONSUMER.DELETE."+p.Stream.Name+"."+lane, cancel)
	if _, _, err := converge.Apply(ctx, c, p2, converge.Options{Recreate: true, Concurrency: 1}); err == nil {
		t.Fatal("the recreate was not interrupted")
	}
	d, _, err := converge.Apply(context.Background(), open(t, srv.URL()), p2, converge.Options{})
	if err != nil {
		t.Fatalf("a plain re-run must finish the interrupted recreate: %v (actions %+v)", err, d.Counts())
	}
	for _, l := range p2.Consumers {
		if info := consumerInfo(t, js, p.Stream.Name, l.Durable); info.Config.MaxWaiting != 64 || info.Paused {
			t.Fatalf("%s not as designed after the re-run: paused=%v %+v", l.Durable, info.Paused, info.Config)
		}
	}
	if s := seqOf(t, next(t, js, p.Stream.Name, lane)); s != seqs[2] {
		t.Fatalf("the lane delivers %d, want %d (position lost)", s, seqs[2])
	}
	assertNoPlaceholders(t, js, p.Stream.Name)
}

// TestInterruptedRecreatePauseDoesNotOutliveIt: a recreate interrupted
// right after it paused a lane (with a long --timeout, so a long pause);
// the next apply finishes, and no lane stays paused.
func TestInterruptedRecreatePauseDoesNotOutliveIt(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(fmt.Sprintf("recreate=%v", flag), func(t *testing.T) {
			srv, _, js, p, _ := laneWithProgress(t)
			lane := p.Consumers[0].Durable
			changed := testutil.Seed(2)
			changed.Lane.MaxWaiting = 64
			p2 := testutil.PlanDesign(t, changed)
			slow, err := connect.Open(context.Background(), connect.Options{Server: srv.URL(), Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer slow.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancelOn(t, srv.URL(), "$JS.API.CONSUMER.PAUSE."+p.Stream.Name+"."+lane, cancel)
			converge.Apply(ctx, slow, p2, converge.Options{Recreate: true, Concurrency: 1})
			if _, _, err := converge.Apply(context.Background(), slow, p2, converge.Options{Recreate: flag}); err != nil {
				t.Fatalf("re-run: %v", err)
			}
			if d, _, err := converge.Apply(context.Background(), slow, p2, converge.Options{}); err != nil || d.Pending() {
				t.Fatalf("not converged: %v %+v", err, d.Counts())
			}
			for _, l := range p2.Consumers {
				if info := consumerInfo(t, js, p.Stream.Name, l.Durable); info.Paused {
					t.Fatalf("%s still paused (for %s) after apply finished the recreate", l.Durable, info.PauseRemaining)
				}
			}
		})
	}
}

// TestRecreateNamesExactlyTheMessagesInFlight: lane 0 has one message out
// while the other lane's messages fill the stream around it; the result
// names that one sequence, not a range over other partitions' messages.
func TestRecreateNamesExactlyTheMessagesInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(2))
	apply(t, c, p, converge.Options{})
	publishSeq(t, js, keysIn(p, 1, 5), 20) // lane 1's messages first
	seqs := publishSeq(t, js, keysIn(p, 0, 2), 3)
	lane := p.Consumers[0].Durable
	if got := seqOf(t, next(t, js, p.Stream.Name, lane)); got != seqs[0] { // in flight, never acked
		t.Fatalf("delivered %d, want %d", got, seqs[0])
	}
	changed := testutil.Seed(2)
	changed.Lane.MaxWaiting = 64
	_, res := apply(t, c, testutil.PlanDesign(t, changed), converge.Options{Recreate: true})
	for _, r := range res.Recreated {
		if r.Lane != lane {
			continue
		}
		if !slices.Equal(r.Position.Redelivered, []uint64{seqs[0]}) || r.Position.InFlight != 1 {
			t.Fatalf("position %+v: want exactly seq %d in flight", r.Position, seqs[0])
		}
		return
	}
	t.Fatalf("lane %s not recreated: %+v", lane, res.Recreated)
}
