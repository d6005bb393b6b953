package converge_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestApplyMissingLaneRecorded: a lane deleted by hand, against a real
// server. By default apply refuses and writes nothing; with the position
// lanes work recorded (given here as lanes work would record it: the
// stream sequence of the last message the lane processed), the new lane
// delivers exactly the messages after it. The records are read only when
// a lane is missing.
func TestApplyMissingLaneRecorded(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	conn := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(4))
	apply(t, conn, p, converge.Options{})
	lane := p.Consumers[1].Durable
	mine := natstest.SubjectsFor(t, p, 1, 2)
	other := natstest.SubjectsFor(t, p, 2, 1)
	var stored []uint64
	publish := func(n int) {
		for i := range n {
			ack, err := js.Publish(context.Background(), mine[i%len(mine)], []byte("m"))
			if err != nil {
				t.Fatal(err)
			}
			stored = append(stored, ack.Sequence)
			natstest.Publish(t, js, other[0])
		}
	}
	take := func(n int) []uint64 {
		var seqs []uint64
		deadline := time.Now().Add(20 * time.Second)
		for len(seqs) < n && time.Now().Before(deadline) {
			for _, m := range natstest.Fetch(t, js, "ORDERS", lane, n-len(seqs), true) {
				md, _ := m.Metadata()
				seqs = append(seqs, md.Sequence.Stream)
			}
		}
		return seqs
	}
	publish(10)
	processed := take(6)
	if !slices.Equal(processed, stored[:6]) {
		t.Fatalf("took %v of %v", processed, stored)
	}
	if err := js.DeleteConsumer(context.Background(), "ORDERS", lane); err != nil {
		t.Fatal(err)
	}
	publish(4)

	var calls atomic.Int32
	records := func(_ context.Context, stream, design string) (map[string]converge.LaneRecord, error) {
		calls.Add(1)
		if stream != "ORDERS" || design != "orders" {
			return nil, errors.New("asked for another design")
		}
		return map[string]converge.LaneRecord{lane: {Instance: "a", Processed: processed[len(processed)-1]}}, nil
	}

	// By default: refused, nothing written.
	log := watchAPI(t, srv.URL())
	d, _, err := converge.Apply(context.Background(), conn, p, converge.Options{LaneRecords: records})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "the 14 messages stored on its partition") {
		t.Fatalf("want a refusal counting the 14 stored messages: %v", err)
	}
	if w := writes(log.since(t, conn.NC)); len(w) > 0 {
		t.Fatalf("a refused apply wrote %v", w)
	}
	if m := d.Lanes[1].Missing; m == nil || m.Worker == nil || m.Worker.Instance != "a" {
		t.Fatalf("the diff must carry what lanes work recorded: %+v", d.Lanes[1])
	}

	// recorded: after the last processed message, exactly what is left.
	d, res := apply(t, conn, p, converge.Options{MissingLaneStart: converge.RestartRecorded, LaneRecords: records})
	m := d.Lanes[1].Missing
	if m.RestartSeq != processed[5]+1 || m.Delivered != 8 || m.Skipped != 6 || res.Created != 1 || len(res.Warnings) != 1 ||
		!strings.Contains(res.Warnings[0], "it delivers 8 and skips 6") {
		t.Fatalf("%+v %+v", m, res)
	}
	info := consumerInfo(t, js, "ORDERS", lane)
	if info.Config.DeliverPolicy != jetstream.DeliverByStartSequencePolicy || info.Config.OptStartSeq != m.RestartSeq || info.Config.Metadata[planner.MetaStartSeq] != "" {
		t.Fatalf("the lane starts at %s %d, metadata %v: want its position, and no generation start of its own", info.Config.DeliverPolicy, info.Config.OptStartSeq, info.Config.Metadata)
	}
	if got := take(8); !slices.Equal(got, stored[6:]) {
		t.Fatalf("delivered %v, want %v (nothing processed again)", got, stored[6:])
	}

	// Nothing missing: nothing more read, nothing to do.
	before := calls.Load()
	if d, _ := apply(t, conn, p, converge.Options{LaneRecords: records}); d.Pending() || calls.Load() != before {
		t.Fatalf("pending %v, records read %d more times", d.Pending(), calls.Load()-before)
	}
}
