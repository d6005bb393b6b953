package commands_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// TestInspectKeyParallelWindow: a key-parallel design (keys in flight 4)
// applied by lanes apply, one key's four messages out on lane 0 (its whole
// window, as the server shows), and the record a lanes work instance
// writes for it, written with the membership package as lanes work does
// (a session's lease, a lane taken with compare-and-set, its record
// updated with the window). inspect shows the window, the running keys
// and the oldest waiting key in the table, JSON and Prometheus, and one
// key_holds_window finding naming the lane and the key; the lane's max
// ack pending of 4 is not taken for an unordered lane.
func TestInspectKeyParallelWindow(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	url := srv.URL()
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, out, errs := lanes(t, "apply", "--yes", "--server", url, "--subject", "msgs.received_from.*", "--name", "orders",
		"--partitions", "2", "--keys-in-flight", "4"); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	p := testutil.PlanDesign(t, testutil.Seed(2), func(d *planner.Design) { d.Lane.KeysInFlight = 4 })
	lane := p.Lanes[0].Name

	// One key's four messages, all out: the key holds the window.
	key := ""
	for i := 0; key == ""; i++ {
		k := "user" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if l, ok := p.LaneOf("msgs.received_from." + k); ok && l.Partition == 0 {
			key = k
		}
	}
	for i := 0; i < 4; i++ {
		natstest.Publish(t, js, "msgs.received_from."+key)
	}
	natstest.WaitPending(t, js, p.Stream.Name, lane, 4)
	c, err := js.Consumer(ctx, p.Stream.Name, lane)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(4, jetstream.FetchMaxWait(3*time.Second), jetstream.FetchPriorityGroup(planner.PinnedGroup))
	if err != nil {
		t.Fatal(err)
	}
	var first uint64
	n := 0
	for m := range batch.Messages() {
		if md, err := m.Metadata(); err == nil && n == 0 {
			first = md.Sequence.Stream
		}
		n++
	}
	if n != 4 {
		t.Fatalf("fetched %d of the key's 4 messages: %v", n, batch.Error())
	}

	// The record lanes work keeps: instance one's lease, the lane taken,
	// its window (one key running, its three later messages waiting).
	kv, err := membership.Open(ctx, js, membership.Bucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	scope := membership.Scope(p.Stream.Name, p.Design.Name)
	sess := membership.NewSession(js, kv, scope, membership.Member{Instance: "one", Started: time.Now()}, time.Minute)
	if err := sess.Join(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Leave(context.Background(), 5*time.Second) })
	recs := membership.Records{JS: js, KV: kv, Scope: scope}
	claim, holder, err := recs.Take(ctx, lane, membership.LaneServer{Instance: "one", Epoch: sess.Epoch(), Since: time.Now()}, map[string]string{"one": sess.Epoch()})
	if err != nil || claim == nil {
		t.Fatalf("take: %v (held by %q)", err, holder)
	}
	waitingSince := time.Now().Add(-90 * time.Second)
	if err := recs.Update(ctx, claim, func(ls *membership.LaneServer) {
		ls.Window = &membership.Window{Size: 4, Held: 4, Running: []string{key}, RunningCount: 1, Keys: 1, Holder: key,
			Oldest: &membership.Waiting{Key: key, Seq: first + 1, Since: waitingSince}, At: time.Now()}
	}); err != nil {
		t.Fatal(err)
	}

	code, out, errs := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name, "-o", "json")
	var doc struct {
		Lanes []struct {
			Name          string `json:"name"`
			AckPending    int    `json:"ack_pending"`
			MaxAckPending int    `json:"max_ack_pending"`
			KeysInFlight  int    `json:"keys_in_flight"`
			Window        *struct {
				Size         int      `json:"size"`
				Held         int      `json:"held"`
				RunningCount int      `json:"running_count"`
				Running      []string `json:"running"`
				Holder       string   `json:"holder"`
				Oldest       *struct {
					Key     string  `json:"key"`
					Seq     uint64  `json:"seq"`
					Seconds float64 `json:"seconds"`
				} `json:"oldest_waiting"`
			} `json:"window"`
		} `json:"lanes"`
		Findings []findingDoc `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Lanes) != 2 {
		t.Fatalf("inspect: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	l0, l1 := doc.Lanes[0], doc.Lanes[1]
	w := l0.Window
	switch {
	case l0.Name != lane || l0.KeysInFlight != 4 || l0.AckPending != 4 || l0.MaxAckPending != 4:
		t.Fatalf("lane 0: %+v", l0)
	case w == nil || w.Size != 4 || w.Held != 4 || w.RunningCount != 1 || len(w.Running) != 1 || w.Running[0] != key || w.Holder != key:
		t.Fatalf("lane 0 window: %+v", w)
	case w.Oldest == nil || w.Oldest.Key != key || w.Oldest.Seq != first+1 || w.Oldest.Seconds < 90 || w.Oldest.Seconds > 120:
		t.Fatalf("lane 0 oldest waiting: %+v", w.Oldest)
	case l1.KeysInFlight != 4 || l1.Window != nil:
		t.Fatalf("lane 1 (no record): %+v", l1)
	}
	var holds []findingDoc
	for _, f := range doc.Findings {
		switch f.Code {
		case "key_holds_window":
			holds = append(holds, f)
		case "max_ack_pending", "redelivered", "keys_in_flight_mismatch", "keys_in_flight_unpinned", "ack_wait_below_pinned_ttl":
			t.Errorf("a key-parallel lane as designed got %s: %s", f.Code, f.Message)
		}
	}
	if len(holds) != 1 || holds[0].Lane != lane || holds[0].Severity != "warning" || !strings.Contains(holds[0].Message, "key "+key+" holds the lane's whole window (4 of 4") {
		t.Fatalf("want one key_holds_window on %s naming %s: %+v", lane, key, doc.Findings)
	}

	code, table, errs := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name)
	for _, want := range []string{"WINDOW", "KEYS RUN", "OLDEST WAIT", "4/4 " + key, key + " 1m", "-/4", "key_holds_window: lane " + lane} {
		if code != 0 || !strings.Contains(table, want) {
			t.Errorf("table (exit %d) lacks %q:\n%s\n%s", code, want, table, errs)
		}
	}

	code, prom, errs := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name, "-o", "prometheus")
	labels := `{stream="ORDERS",design="orders",lane="` + lane + `",partition="0"}`
	for _, want := range []string{
		"lanes_lane_keys_in_flight" + labels + " 4",
		"lanes_lane_window_held" + labels + " 4",
		"lanes_lane_keys_running" + labels + " 1",
		"lanes_lane_oldest_waiting_seconds" + labels + " ",
		`lanes_finding{stream="ORDERS",severity="warning",code="key_holds_window",lane="` + lane + `"} 1`,
	} {
		if code != 0 || !strings.Contains(prom, want) {
			t.Errorf("prometheus (exit %d) lacks %q\n%s", code, want, errs)
		}
	}
}
