package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/ordercheck"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// rewound records, per key, the stream sequences a worker ran, in order.
type rewound struct {
	mu    sync.Mutex
	byKey map[string][]uint64
	keyOf map[uint64]string
}

func (r *rewound) handle(ctx context.Context, m *work.Msg) error {
	r.mu.Lock()
	r.byKey[m.Key] = append(r.byKey[m.Key], m.Seq)
	r.keyOf[m.Seq] = m.Key
	r.mu.Unlock()
	return nil
}

func (r *rewound) runs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.byKey {
		n += len(v)
	}
	return n
}

// mark is each key's run count now.
func (r *rewound) mark() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.byKey {
		out[k] = len(v)
	}
	return out
}

// again waits until every key ran its messages from seq on again, and
// checks they ran once each, in stream order, and nothing else did.
func (r *rewound) again(t *testing.T, mark map[string]int, seq uint64) {
	t.Helper()
	want := map[string][]uint64{}
	r.mu.Lock()
	for s, k := range r.keyOf {
		if s >= seq {
			want[k] = append(want[k], s)
		}
	}
	r.mu.Unlock()
	for _, v := range want {
		slices.Sort(v)
	}
	since := func() map[string][]uint64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		out := map[string][]uint64{}
		for k, v := range r.byKey {
			if len(v) > mark[k] {
				out[k] = slices.Clone(v[mark[k]:])
			}
		}
		return out
	}
	testutil.WaitFor(t, fmt.Sprintf("the messages from seq %d run again", seq), 2*time.Minute, func() bool {
		got := since()
		for k, w := range want {
			if len(got[k]) < len(w) {
				return false
			}
		}
		return true
	})
	if got := since(); !mapsEqual(got, want) {
		t.Errorf("ran again %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[string][]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// rewindSetup makes 4 serial lanes with a worker running in this process
// and 40 messages run once (5 on each of 8 keys).
func rewindSetup(t *testing.T) (url string, js jetstream.JetStream, p *planner.Plan, rec *rewound, at []string) {
	t.Helper()
	cleanEnv(t)
	url = natstest.Start(t).URL()
	_, js = natstest.Connect(t, url)
	p = testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, js, p)
	rec = &rewound{byKey: map[string][]uint64{}, keyOf: map[uint64]string{}}
	worktest.Start(t, js, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, work.HandlerFunc(rec.handle))
	var subjects []string
	keys := append(ordercheck.KeysOnEveryLane(t, p), "k-a", "k-b", "k-c", "k-d")
	for i := 0; i < 5; i++ {
		for _, k := range keys {
			s, _ := p.SubjectForKey(k)
			subjects = append(subjects, s)
		}
	}
	natstest.Publish(t, js, subjects...)
	testutil.WaitFor(t, "every message run once", time.Minute, func() bool { return rec.runs() == len(subjects) })
	// A handler returns before its ack is applied: positions are read
	// once the server has every ack.
	testutil.WaitFor(t, "every message acked", time.Minute, func() bool {
		for _, c := range p.Consumers {
			cons, err := js.Consumer(context.Background(), p.Stream.Name, c.Durable)
			if err != nil {
				t.Fatal(err)
			}
			if i := cons.CachedInfo(); i.NumAckPending > 0 || i.NumPending > 0 {
				return false
			}
		}
		return true
	})
	return url, js, p, rec, []string{"--server", url, "--stream", p.Stream.Name, "--design", p.Design.Name}
}

// lanePositions are the lanes' ack floors, deliveries and pauses.
func lanePositions(t *testing.T, js jetstream.JetStream, p *planner.Plan) string {
	t.Helper()
	var out []string
	for _, c := range p.Consumers {
		cons, err := js.Consumer(context.Background(), p.Stream.Name, c.Durable)
		if err != nil {
			t.Fatal(err)
		}
		i := cons.CachedInfo()
		out = append(out, fmt.Sprintf("%s floor=%d delivered=%d/%d paused=%v", i.Name, i.AckFloor.Stream, i.Delivered.Stream, i.Delivered.Consumer, i.Paused))
	}
	return strings.Join(out, "\n")
}

// TestRewindCommand: every bad input exits 2 with one clear line and
// changes nothing; a dry run exits 3, shows per lane the position now and
// after and the messages that run again, and changes nothing; a rewind to
// a time (RFC 3339) runs the messages from there again, each key's in
// order, with the worker running.
func TestRewindCommand(t *testing.T) {
	url, js, p, rec, at := rewindSetup(t)
	_ = url
	before := lanePositions(t, js, p)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lanes", "nope", "--to-seq", "5"}, `no lane "nope"`},
		{[]string{"--to-seq", "41"}, "--to-seq 41 is beyond stream ORDERS's last sequence 40"},
		{[]string{"--to-seq", "0"}, "--to-seq 0"},
		{[]string{"--to-time", future}, "is in the future"},
		{[]string{"--to-time", "13:99"}, "not a time"},
		{[]string{"--to-seq", "5", "--to-time", "15m"}, "give one"},
		{[]string{}, "--to-seq N or --to-time TIME"},
		{[]string{"--design", "nope", "--to-seq", "5"}, `design "nope" has no lanes`},
	} {
		args := append(append([]string{"rewind"}, at...), tc.args...)
		if tc.args != nil && len(tc.args) > 1 && tc.args[0] == "--design" {
			args = append([]string{"rewind", "--server", url, "--stream", p.Stream.Name}, tc.args...)
		}
		code, out, errs := lanes(t, args...)
		if code != 2 || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("lanes %v: exit %d, stderr %q, stdout %q; want exit 2 saying %q", tc.args, code, errs, out, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(errs), "\n"); n > 1 {
			t.Errorf("lanes %v: %d lines of error, want one or two:\n%s", tc.args, n+1, errs)
		}
	}
	if after := lanePositions(t, js, p); after != before {
		t.Fatalf("bad input changed the lanes:\n%s\nnow:\n%s", before, after)
	}

	code, out, errs := lanes(t, append(append([]string{"rewind"}, at...), "--to-seq", "21", "--dry-run")...)
	if code != 3 || !strings.Contains(out, "would rewind") || !strings.Contains(out, "4 of 4 lane(s) of orders on ORDERS would be rewound") || !strings.Contains(out, "20 message(s) run again") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("dry run:\n%s", out)
	code, out, errs = lanes(t, append(append([]string{"rewind"}, at...), "--to-seq", "21", "--dry-run", "-o", "json")...)
	var doc struct {
		DryRun bool   `json:"dry_run"`
		Seq    uint64 `json:"seq"`
		Again  int64  `json:"again"`
		Lanes  []struct {
			Lane      string `json:"lane"`
			AckFloor  uint64 `json:"ack_floor"`
			Delivered uint64 `json:"delivered"`
			To        uint64 `json:"to"`
			Again     int64  `json:"again"`
			Changed   bool   `json:"changed"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 3 || err != nil || !doc.DryRun || doc.Seq != 21 || doc.Again != 20 || len(doc.Lanes) != 4 {
		t.Fatalf("dry run -o json: exit %d %v\n%s%s", code, err, out, errs)
	}
	for _, l := range doc.Lanes {
		if !l.Changed || l.To != 21 || l.AckFloor != l.Delivered || l.Again != 5 {
			t.Errorf("dry run, lane %+v: want to 21, 5 again (2 keys a lane, from seq 21)", l)
		}
	}
	if after := lanePositions(t, js, p); after != before {
		t.Fatalf("a dry run changed the lanes:\n%s\nnow:\n%s", before, after)
	}

	// To a time: the store time of seq 21.
	st, err := js.Stream(context.Background(), p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(context.Background(), 21)
	if err != nil {
		t.Fatal(err)
	}
	mark := rec.mark()
	code, out, errs = lanes(t, append(append([]string{"rewind"}, at...), "--to-time", m.Time.Format(time.RFC3339Nano))...)
	if code != 0 || !strings.Contains(out, "(seq 21): 4 of 4 lane(s) of orders on ORDERS rewound") {
		t.Fatalf("rewind to a time: exit %d\n%s%s", code, out, errs)
	}
	rec.again(t, mark, 21)
}

// TestRewindKilledThenFinished: lanes rewind killed with SIGKILL at its
// second CONSUMER.RESET leaves the lanes paused, none running anything
// again; the same rewind run again finishes it: every lane resumes and
// the messages from the point run again exactly once, each key's in
// order (a lane reset twice while paused runs nothing twice).
func TestRewindKilledThenFinished(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test")
	}
	url, js, p, rec, at := rewindSetup(t)
	mark := rec.mark()
	args := append(append([]string{"rewind"}, at...), "--to-seq", "17")
	killAfter(t, url, "CONSUMER.RESET", 2, args...)
	if n := pausedLanes(t, js, p.Stream.Name); n != 4 {
		t.Fatalf("%d lanes paused after the kill, want 4 (paused before any reset):\n%s", n, lanePositions(t, js, p))
	}
	code, out, errs := lanes(t, append(append([]string{"inspect"}, at...), "-o", "json")...)
	if code > 1 || !strings.Contains(out, "lanes rewind") {
		t.Errorf("inspect after the kill does not name lanes rewind: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = lanes(t, args...)
	if code != 0 {
		t.Fatalf("re-run after the kill: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("re-run:\n%s", out)
	if n := pausedLanes(t, js, p.Stream.Name); n != 0 {
		t.Fatalf("%d lanes still paused after the re-run", n)
	}
	rec.again(t, mark, 17)
}
