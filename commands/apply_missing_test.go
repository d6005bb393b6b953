package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// missingLane is the repro of a lane deleted by hand: apply the
// seed design, publish to one lane's partition (and another's, so stream
// and partition sequences differ), let the lane process some, delete it
// with the server's API (as nats consumer rm does), publish more.
type missingLane struct {
	url       string
	js        jetstream.JetStream
	lane      string
	stored    []uint64 // stream sequences on the lane's partition, in order
	processed []uint64 // the ones the deleted lane delivered and acked
}

const missingPartition = 3

func newMissingLane(t *testing.T) *missingLane {
	t.Helper()
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	m := &missingLane{url: srv.URL(), js: js, lane: fmt.Sprintf("orders-n8-%02d", missingPartition)}
	if code, _, errs := lanes(t, m.args()...); code != 0 {
		t.Fatalf("first apply: exit %d %s", code, errs)
	}
	p := testutil.PlanDesign(t, planner.Design{Name: "orders", Subject: "msgs.received_from.*", KeyTokens: []int{1}, Partitions: 8})
	mine := natstest.SubjectsFor(t, p, missingPartition, 3)
	other := natstest.SubjectsFor(t, p, missingPartition+2, 1)
	m.publish(t, mine, other, 30)
	m.processed = m.take(t, 20)
	if err := js.DeleteConsumer(context.Background(), "ORDERS", m.lane); err != nil {
		t.Fatal(err)
	}
	m.publish(t, mine, other, 10)
	return m
}

func (m *missingLane) args(extra ...string) []string {
	return append(applyArgs("--server", m.url), extra...)
}

// publish sends n messages to the lane's partition, cycling through its
// keys, with one to another partition after each.
func (m *missingLane) publish(t *testing.T, mine, other []string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		ack, err := m.js.Publish(ctx, mine[i%len(mine)], []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		m.stored = append(m.stored, ack.Sequence)
		if _, err := m.js.Publish(ctx, other[0], []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// take delivers and acks n messages of the lane, as a worker would, and
// returns their stream sequences.
func (m *missingLane) take(t *testing.T, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	deadline := time.Now().Add(20 * time.Second)
	for len(seqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("lane %s delivered %d of %d messages: %v", m.lane, len(seqs), n, seqs)
		}
		for _, msg := range natstest.Fetch(t, m.js, "ORDERS", m.lane, n-len(seqs), true) {
			md, err := msg.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, md.Sequence.Stream)
		}
	}
	return seqs
}

// laneGone fails the test if the lane exists: a refused apply changes nothing.
func (m *missingLane) laneGone(t *testing.T) {
	t.Helper()
	if _, err := m.js.Consumer(context.Background(), "ORDERS", m.lane); err == nil {
		t.Fatal("a refused apply created the missing lane")
	}
}

// TestApplyMissingLaneRefused: by default apply refuses to create a lane
// deleted by hand at its generation's start (issue 15.11: it replayed the
// whole partition), and says what would be replayed: how many messages,
// from which stream sequence. The dry run shows it, also in JSON; nothing
// changes on the server.
func TestApplyMissingLaneRefused(t *testing.T) {
	m := newMissingLane(t)
	first := m.stored[0]
	code, out, errs := lanes(t, m.args()...)
	want := fmt.Sprintf("40 messages stored on its partition from stream seq %d", first)
	if code != commands.ExitRefused || !strings.Contains(errs, m.lane) || !strings.Contains(errs, want) || !strings.Contains(errs, "--missing-lane-start") {
		t.Fatalf("exit %d, want 4 naming the lane, %q and the flag\n%s\n%s", code, want, out, errs)
	}
	if !strings.Contains(out, m.lane) || !strings.Contains(out, "refused") {
		t.Fatalf("the diff must show the lane refused:\n%s", out)
	}
	m.laneGone(t)

	code, out, errs = lanes(t, m.args("--dry-run", "-o", "json")...)
	if code != commands.ExitRefused {
		t.Fatalf("dry run: exit %d, want 4 (apply would refuse)\n%s", code, errs)
	}
	var doc struct {
		Refused bool `json:"refused"`
		Diff    struct {
			Lanes []struct {
				Name    string `json:"name"`
				Action  string `json:"action"`
				Missing *struct {
					From     uint64 `json:"from_seq"`
					Stored   uint64 `json:"stored"`
					Counted  bool   `json:"counted"`
					FirstSeq uint64 `json:"first_seq"`
					Start    string `json:"start"`
				} `json:"missing"`
			} `json:"lanes"`
		} `json:"diff"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	l := doc.Diff.Lanes[missingPartition]
	if !doc.Refused || l.Name != m.lane || l.Action != "refused" || l.Missing == nil ||
		l.Missing.Stored != 40 || !l.Missing.Counted || l.Missing.FirstSeq != first || l.Missing.Start != "" {
		t.Fatalf("JSON must carry the missing lane: %+v %+v\n%s", l, l.Missing, out)
	}
	for i, other := range doc.Diff.Lanes {
		if i != missingPartition && (other.Action != "unchanged" || other.Missing != nil) {
			t.Fatalf("lane %s: %+v", other.Name, other)
		}
	}
	m.laneGone(t)
}

// TestApplyMissingLaneStart: each explicit choice of where the missing
// lane restarts, and exactly which messages the new lane delivers.
func TestApplyMissingLaneStart(t *testing.T) {
	t.Run("start replays the whole partition", func(t *testing.T) {
		m := newMissingLane(t)
		code, out, errs := lanes(t, m.args("--missing-lane-start", "start", "--dry-run")...)
		if code != commands.ExitChanges || !strings.Contains(out, "delivers the 40 messages stored on its partition") {
			t.Fatalf("dry run: exit %d, want 3\n%s\n%s", code, out, errs)
		}
		code, out, errs = lanes(t, m.args("--missing-lane-start", "start")...)
		if code != 0 || !strings.Contains(out, "1 lanes created") || !strings.Contains(out, "warning: orders-n8-03 was missing: restarts at stream seq 1") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		if got := m.take(t, len(m.stored)); !slices.Equal(got, m.stored) {
			t.Fatalf("delivered %v, want every stored message %v", got, m.stored)
		}
	})
	t.Run("now skips what is stored", func(t *testing.T) {
		m := newMissingLane(t)
		code, out, errs := lanes(t, m.args("--missing-lane-start", "now")...)
		if code != 0 || !strings.Contains(out, "skips the 40 messages stored on its partition") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		natstest.WaitPending(t, m.js, "ORDERS", m.lane, 0)
		before := len(m.stored)
		p, _ := planner.New(planner.Design{Name: "orders", Subject: "msgs.received_from.*", KeyTokens: []int{1}, Partitions: 8})
		m.publish(t, natstest.SubjectsFor(t, p, missingPartition, 1), natstest.SubjectsFor(t, p, missingPartition+2, 1), 2)
		natstest.WaitPending(t, m.js, "ORDERS", m.lane, 2)
		if got := m.take(t, 2); !slices.Equal(got, m.stored[before:]) {
			t.Fatalf("delivered %v, want only the messages published after apply %v", got, m.stored[before:])
		}
	})
	t.Run("recorded: where lanes work left the lane", func(t *testing.T) {
		cleanEnv(t)
		srv := natstest.Start(t)
		_, js := natstest.Connect(t, srv.URL())
		m := &missingLane{url: srv.URL(), js: js, lane: fmt.Sprintf("orders-n8-%02d", missingPartition)}
		if code, _, errs := lanes(t, m.args()...); code != 0 {
			t.Fatalf("first apply: exit %d %s", code, errs)
		}
		p, _ := planner.New(planner.Design{Name: "orders", Subject: "msgs.received_from.*", KeyTokens: []int{1}, Partitions: 8})
		mine, other := natstest.SubjectsFor(t, p, missingPartition, 3), natstest.SubjectsFor(t, p, missingPartition+2, 1)
		rec := newCallRecorder(t, 0)
		worker, _ := startLanes(t, workArgs("-s", m.url, "--http", rec.URL, "--instance", "w")...)
		m.publish(t, mine, other, 20)
		testutil.WaitFor(t, "40 messages processed", 30*time.Second, func() bool { return rec.distinct() >= 40 })
		// Deleted by hand while lanes work serves it: the worker records
		// where the lane was.
		if err := js.DeleteConsumer(context.Background(), "ORDERS", m.lane); err != nil {
			t.Fatal(err)
		}
		last := m.stored[len(m.stored)-1]
		testutil.WaitFor(t, "the deleted lane's position recorded", 20*time.Second, func() bool {
			code, out, _ := lanes(t, m.args("--missing-lane-start", "recorded", "--dry-run", "-o", "json")...)
			return code == commands.ExitChanges && strings.Contains(out, fmt.Sprintf(`"restart_seq": %d`, last+1))
		})
		if code := stopChild(t, worker, syscall.SIGTERM, 20*time.Second); code != 0 {
			t.Fatalf("lanes work: exit %d", code)
		}
		before := len(m.stored)
		m.publish(t, mine, other, 5)
		code, out, errs := lanes(t, m.args("--missing-lane-start", "recorded")...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		natstest.WaitPending(t, js, "ORDERS", m.lane, 5)
		if got := m.take(t, 5); !slices.Equal(got, m.stored[before:]) {
			t.Fatalf("delivered %v, want only what lanes work had not processed %v", got, m.stored[before:])
		}
	})
	t.Run("recorded: no lanes work ever served the lane", func(t *testing.T) {
		m := newMissingLane(t)
		code, out, errs := lanes(t, m.args("--missing-lane-start", "recorded")...)
		if code != commands.ExitRefused || !strings.Contains(errs, "lanes work has recorded no position") {
			t.Fatalf("exit %d, want 4 saying no position is recorded\n%s\n%s", code, out, errs)
		}
		m.laneGone(t)
	})
	t.Run("a bad value is a usage error", func(t *testing.T) {
		cleanEnv(t)
		code, out, errs := lanes(t, applyArgs("--server", "nats://127.0.0.1:1", "--missing-lane-start", "sometime")...)
		if code != commands.ExitUsage || !strings.Contains(errs, `--missing-lane-start "sometime"`) || out != "" {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
	})
}
