package top_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/golden"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/top"
)

var t0 = time.Date(2026, 3, 2, 14, 5, 0, 0, time.UTC)

// synthetic is a report of n lanes of design orders, as Judge makes one:
// backlogs that grow with the partition, lane 3 stuck on alice's message
// (a critical finding), lane 5 paused, served by two instances.
func synthetic(n int, at time.Time) *health.Report {
	width := len(fmt.Sprint(n - 1))
	r := &health.Report{
		Stream: "ORDERS", Time: at, LastSeq: 5000, Messages: 4000, Consumers: n, Replicas: 1, Interval: 2 * time.Second,
		Layouts: []health.Layout{{Source: "orders.received_from.*", Destination: fmt.Sprintf("orders.received_from.n%d.{{partition(%d,1)}}.{{wildcard(1)}}", n, n),
			Partitions: n, Origin: "stream", Current: true}},
		Workers: []health.Workers{{Design: "orders", Live: []membership.Member{{Instance: "w1"}, {Instance: "w2"}}, Gone: []membership.Member{{Instance: "w0", Expired: true}}}},
	}
	for p := range n {
		l := health.Lane{
			Name: fmt.Sprintf("orders-n%d-%0*d", n, width, p), Design: "orders", Partition: p, Partitions: n, Tagged: true, KeysInFlight: 1,
			Filter: fmt.Sprintf("orders.received_from.n%d.%d.*", n, p), State: health.StateOK,
			Pending: uint64(p % 7 * 10), MaxAckPending: 1, Backlog: uint64(p % 7 * 10), At: at,
			AckPolicy: "explicit", AckWait: 30 * time.Second, MaxDeliver: -1, Durable: true,
			DeliveredSeq: uint64(100 + p), AckFloorSeq: uint64(99 + p), DeliveredConsumer: uint64(100 + p), AckFloorConsumer: uint64(99 + p),
			DeliveredRate: float64(p%5) + 0.5, AckedRate: float64(p % 5),
			Server: &health.Server{Instance: []string{"w1", "w2"}[p%2], Since: at.Add(-3 * time.Minute)},
		}
		if l.Backlog > 0 {
			l.AckPending = 1
			l.Head = &health.Head{Seq: uint64(100 + p), Subject: fmt.Sprintf("orders.received_from.n%d.%d.k%d", n, p, p), Key: fmt.Sprintf("k%d", p), Time: at.Add(-time.Duration(p%7) * time.Second)}
			l.HeadDeliveries = 1
		}
		switch p {
		case 3:
			l.Head.Key, l.Head.Subject, l.HeadDeliveries, l.Redelivered = "alice", fmt.Sprintf("orders.received_from.n%d.3.alice", n), 4, 1
			l.Head.Time = at.Add(-4 * time.Minute)
			r.Findings = append(r.Findings, health.Finding{Severity: health.Critical, Code: "stuck", Lane: l.Name,
				Message: "head message seq 103 (key alice) delivered 4 times, out for 4m00s", Advice: "look at the handler's log for seq 103"})
		case 5:
			l.Paused, l.PauseRemaining = true, actions.Forever
			l.PausedBy = &membership.Pause{By: "ops@host", Reason: "bad deploy"}
			r.Findings = append(r.Findings, health.Finding{Severity: health.Warning, Code: "paused", Lane: l.Name,
				Message: "paused until resumed by ops@host", Advice: "lanes resume when ready"})
		}
		r.Lanes = append(r.Lanes, l)
	}
	r.Summarize()
	return r
}

func newModel(b top.Backend) *top.Model {
	m := top.New(top.Config{Stream: "ORDERS", Design: "orders", Server: "nats://127.0.0.1:4222", Every: 2 * time.Second,
		By: "ops@host (lanes top)", Styles: render.PlainStyles()}, b)
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 30})
	return m
}

func keyMsg(s string) tea.KeyMsg {
	switch s {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
}

// press sends keys (a string of runes is typed one by one) and runs
// the commands they return that talk to the backend (waitFor: true).
func press(t *testing.T, m *top.Model, keys ...string) {
	t.Helper()
	for _, k := range keys {
		var msgs []tea.Msg
		if len(k) > 1 && !strings.Contains("enter esc tab down ctrl+c", k) {
			for _, r := range k {
				msgs = append(msgs, keyMsg(string(r)))
			}
		} else {
			msgs = append(msgs, keyMsg(k))
		}
		for _, msg := range msgs {
			_, cmd := m.Update(msg)
			settle(m, cmd)
		}
	}
}

// settle runs a command to its message and feeds it back, as the
// program would (a quit is left alone).
func settle(m *top.Model, cmd tea.Cmd) {
	for cmd != nil {
		msg := cmd()
		if msg == nil {
			return
		}
		if _, ok := msg.(tea.QuitMsg); ok {
			return
		}
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch { // in turn: the model is driven by one goroutine
				settle(m, c)
			}
			return
		}
		_, cmd = m.Update(msg)
	}
}

func turn(m *top.Model, r *health.Report) {
	_, cmd := m.Update(top.TurnMsg{At: r.Time, Report: r, Last: r})
	settle(m, cmd)
}

// rowsOf are the lane names in the list, top to bottom.
func rowsOf(frame string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(frame, "\n") {
		if strings.HasPrefix(line, "  LANE") {
			in = true
			continue
		}
		if in && (strings.HasPrefix(line, "  orders") || strings.HasPrefix(line, "> orders")) {
			out = append(out, strings.Fields(line[2:])[0])
		} else if in {
			break
		}
	}
	return out
}

// TestTopFrame: the first frame shows the summary, the worst lanes on top
// (the stuck one, then the paused one, then by backlog), the findings
// with their advice, and fits the terminal exactly.
func TestTopFrame(t *testing.T) {
	m := newModel(nil)
	turn(m, synthetic(16, t0))
	frame := m.View()
	golden.Check(t, "top-frame.txt", []byte(frame+"\n"))
	lines := strings.Split(frame, "\n")
	if len(lines) != 30 {
		t.Errorf("%d lines, want the terminal's 30", len(lines))
	}
	rows := rowsOf(frame)
	if len(rows) < 3 || rows[0] != "orders-n16-03" || rows[1] != "orders-n16-05" {
		t.Errorf("rows %v: want the stuck lane, then the paused one, on top", rows)
	}
}

// TestTopSortFilter: s sorts by the next column (by name, ascending),
// S reverses; / filters as it is typed and esc clears it; key:alice
// finds the lane that holds alice (Report.Locate); state:paused finds
// the paused lane.
func TestTopSortFilter(t *testing.T) {
	m := newModel(nil)
	turn(m, synthetic(16, t0))
	press(t, m, "s") // FINDING -> LANE
	if rows := rowsOf(m.View()); rows[0] != "orders-n16-00" || rows[1] != "orders-n16-01" {
		t.Errorf("sorted by lane: %v", rows)
	}
	press(t, m, "S")
	if rows := rowsOf(m.View()); rows[0] != "orders-n16-15" {
		t.Errorf("reversed: %v", rows)
	}
	press(t, m, "s") // BACKLOG, largest first
	if rows := rowsOf(m.View()); rows[0] != "orders-n16-06" || rows[1] != "orders-n16-13" {
		t.Errorf("by backlog: %v", rows)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"key:alice", []string{"orders-n16-03", "orders-n16-07"}}, // its head, and where its next messages go
		{"state:paused", []string{"orders-n16-05"}},
		{"stuck", []string{"orders-n16-03"}},
		{"lane:n16-1 instance:w2", []string{"orders-n16-13", "orders-n16-11", "orders-n16-15"}},
	} {
		press(t, m, "/", tc.filter, "enter")
		frame := m.View()
		if got := rowsOf(frame); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("filter %q: rows %v, want %v\n%s", tc.filter, got, tc.want, frame)
		}
		press(t, m, "esc")
		if got := rowsOf(m.View()); len(got) < 10 {
			t.Errorf("esc kept the filter %q: %v", tc.filter, got)
		}
	}
	press(t, m, "/", "nothing-matches", "enter")
	if frame := m.View(); !strings.Contains(frame, `no lane matches the filter "nothing-matches"`) {
		t.Errorf("no match not said:\n%s", frame)
	}
}

// fakeBackend answers head reads and records actions.
type fakeBackend struct {
	acts        []string
	err         error
	skipErr     error
	parkErr     error
	rewindErr   error
	parkedErr   error
	parkedCount int
	parkedReads int
	lastSeq     uint64
}

func (f *fakeBackend) Act(a *top.Action, t actions.Target, by string, dryRun bool) (*actions.Outcome, error) {
	f.acts = append(f.acts, fmt.Sprintf("%s %v dry=%v by=%s", a.Name, t.Lanes, dryRun, by))
	if f.err != nil {
		return nil, f.err
	}
	return &actions.Outcome{Action: a.Name, Stream: t.Stream, Design: t.Design, DryRun: dryRun, Changed: 1,
		Lanes: []actions.LaneChange{{Lane: t.Lanes[0], Before: "running", After: "paused until resumed", Changed: true}}}, nil
}

// Skip answers like actions.Skip on the stuck lane (orders-n16-03,
// alice's seq 103 out to w2); skipErr fails the real run, parkErr the
// park (its dry run too).
func (f *fakeBackend) Skip(t actions.Target, o actions.SkipOptions) (*actions.SkipOutcome, error) {
	f.acts = append(f.acts, fmt.Sprintf("skip %v seq=%d park=%v dry=%v by=%s", t.Lanes, o.Seq, o.Park, o.DryRun, o.By))
	switch {
	case o.Park && f.parkErr != nil:
		return nil, f.parkErr
	case !o.DryRun && f.skipErr != nil:
		return nil, f.skipErr
	}
	out := &actions.SkipOutcome{Action: "skip", Stream: t.Stream, Design: t.Design, Lane: t.Lanes[0], Seq: o.Seq, Subject: "orders.received_from.n16.3.alice",
		Key: "alice", Stored: t0.Add(-4 * time.Minute), Age: "4m0s", Attempts: 4, How: "term", RunningOn: "w2", SettledBy: "w2", Result: "would terminate", DryRun: o.DryRun, Changed: true}
	if o.Park {
		out.How, out.DeadLetter, out.Result = "park", "dlq.orders", "would park"
	}
	if !o.DryRun {
		out.Result = map[bool]string{false: "terminated", true: "parked"}[o.Park]
	}
	return out, nil
}

// Rewind answers like actions.Rewind: a lane goes back to the point; on
// the whole design, lane 00 delivered nothing since and is left.
func (f *fakeBackend) Rewind(t actions.Target, o actions.RewindOptions) (*actions.RewindOutcome, error) {
	f.acts = append(f.acts, fmt.Sprintf("rewind %v seq=%d time=%v dry=%v", t.Lanes, o.ToSeq, !o.ToTime.IsZero(), o.DryRun))
	if !o.DryRun && f.rewindErr != nil {
		return nil, f.rewindErr
	}
	out := &actions.RewindOutcome{Stream: t.Stream, Design: t.Design, DryRun: o.DryRun, Seq: o.ToSeq}
	if !o.ToTime.IsZero() {
		at := o.ToTime.UTC()
		out.Seq, out.Time = 90, &at
	}
	lanes := t.Lanes
	if len(lanes) == 0 {
		lanes = []string{"orders-n16-00", "orders-n16-03"}
	}
	for _, name := range lanes {
		l := actions.RewindLane{Lane: name, AckFloor: 102, Delivered: 103, To: out.Seq, Again: 13, Changed: true}
		if name == "orders-n16-00" {
			l = actions.RewindLane{Lane: name, AckFloor: 99, Delivered: 99, Note: "delivered nothing at or after the point: left as it is"}
		}
		out.Lanes = append(out.Lanes, l)
		if l.Changed {
			out.Changed++
			out.Again += l.Again
		}
	}
	return out, nil
}

// Parked: two parked messages of the lane, or parkedErr.
func (f *fakeBackend) Parked(sel *actions.Selection) (*actions.Parked, error) {
	f.parkedReads++
	if f.parkedErr != nil {
		return nil, f.parkedErr
	}
	lane := sel.Lanes[0].Name
	p := &actions.Parked{Stream: sel.Report.Stream, Design: sel.Lanes[0].Design, Time: t0,
		DeadLetters: []actions.DeadLetter{{Subject: "dlq.orders", Stream: "DLQ"}}}
	for i := range f.parkedCount {
		p.Messages = append(p.Messages, actions.ParkedMsg{Seq: uint64(7 + i), DeadLetter: "dlq.orders", DLStream: "DLQ", Stream: p.Stream, OriginSeq: uint64(40 + i),
			Lane: lane, Key: fmt.Sprintf("bob%d", i), Attempts: 5, Reason: "failed", Error: "handler: no such order\x1b[2J", ParkedAt: t0.Add(-time.Duration(10-i) * time.Minute)})
	}
	return p, nil
}

// Last: the key's last message is seq 4321, or none for subjects of k9.
func (f *fakeBackend) Last(stream, subject string) (*top.Message, error) {
	if strings.HasSuffix(subject, ".k9") {
		return nil, nil
	}
	return &top.Message{Seq: f.lastSeq, Subject: subject, Time: t0.Add(-time.Minute)}, nil
}

func (f *fakeBackend) Head(stream string, seq uint64) (*top.Message, error) {
	return &top.Message{Seq: seq, Subject: "orders.received_from.n16.3.alice", Time: t0.Add(-4 * time.Minute),
		Header: map[string][]string{"Nats-Msg-Id": {"m-103"}}, Data: []byte("{\"id\":103}\x1b[2J\n")}, nil
}

// TestTopDrillDown: enter on the stuck lane shows its config, its head
// (seq, subject, key, age, attempts, headers, the payload escaped: no
// escape sequence reaches the terminal), its sparkline and its findings;
// l finds the lane of a key and opens it.
func TestTopDrillDown(t *testing.T) {
	m := newModel(&fakeBackend{parkedCount: 2, lastSeq: 4321})
	prev := synthetic(16, t0.Add(-2*time.Second))
	turn(m, prev)
	turn(m, synthetic(16, t0))
	press(t, m, "enter")
	frame := m.View()
	golden.Check(t, "top-lane.txt", []byte(frame+"\n"))
	for _, want := range []string{"Lane orders-n16-03", "filter orders.received_from.n16.3.*", "seq 103, subject orders.received_from.n16.3.alice, key alice, age 4m00s, attempts 4",
		"Nats-Msg-Id: m-103", `15 bytes: {"id":103}\x1b[2J\n`, "deliv/s ", "CRIT      stuck",
		"parked    2 messages from this lane on dlq.orders (stream DLQ):", `seq 8 (was 41), key bob1, 5 attempts, age 9m00s: failed: handler: no such order\x1b[2J`} {
		if !strings.Contains(frame, want) {
			t.Errorf("lane view lacks %q:\n%s", want, frame)
		}
	}
	if strings.Contains(frame, "\x1b") {
		t.Errorf("an escape sequence from the payload reached the screen")
	}
	places, err := prev.Locate("k6")
	if err != nil || len(places) != 1 || len(places[0].Lanes) != 1 {
		t.Fatalf("locate k6 in the report: %v %v", places, err)
	}
	press(t, m, "esc", "l", "k6", "enter")
	if frame := m.View(); !strings.Contains(frame, "Lane "+places[0].Lanes[0]) || !strings.Contains(frame, fmt.Sprintf("(key k6): partition %d of", places[0].Partition)) {
		t.Errorf("locate k6 (%s):\n%s", places[0].Lanes[0], frame)
	}
	// The findings pane links to the lanes: tab, down to the paused lane's finding, enter.
	press(t, m, "esc", "tab", "down", "enter")
	if frame := m.View(); !strings.Contains(frame, "Lane orders-n16-05") || !strings.Contains(frame, "until resumed (by ops@host: bad deploy)") {
		t.Errorf("finding -> lane:\n%s", frame)
	}
}

// TestTopConfirm: p asks first, stating what changes (from the action's
// dry run); n changes nothing; y acts and says the result; an error is
// shown in the status line, and the view stays.
func TestTopConfirm(t *testing.T) {
	b := &fakeBackend{}
	m := newModel(b)
	turn(m, synthetic(16, t0))
	press(t, m, "p")
	frame := m.View()
	for _, want := range []string{"Pause lane orders-n16-03 of stream ORDERS?", "orders-n16-03: running -> paused until resumed", "y: pause 1 lane"} {
		if !strings.Contains(frame, want) {
			t.Errorf("confirmation lacks %q:\n%s", want, frame)
		}
	}
	press(t, m, "n")
	if len(b.acts) != 1 || !strings.Contains(m.View(), "pause cancelled: nothing changed") {
		t.Errorf("n: acts %v\n%s", b.acts, m.View())
	}
	press(t, m, "p", "y")
	if len(b.acts) != 3 || b.acts[2] != "pause [orders-n16-03] dry=false by=ops@host (lanes top)" {
		t.Errorf("acts %v", b.acts)
	}
	if frame := m.View(); !strings.Contains(frame, "pause: 1 lane paused (orders-n16-03)") {
		t.Errorf("result not shown:\n%s", frame)
	}
	b.err = errors.New("nats: timeout")
	press(t, m, "U")
	if frame := m.View(); !strings.Contains(frame, "resume every lane of design orders: nats: timeout") || !strings.Contains(frame, "LANE") {
		t.Errorf("error not shown in the view:\n%s", frame)
	}
}

// TestTopResizeAndLostServer: a resize redraws to the new size (a small
// terminal keeps the list and status); a lost connection keeps the last
// figures on screen and says so; the next report clears it.
func TestTopResizeAndLostServer(t *testing.T) {
	m := newModel(nil)
	turn(m, synthetic(64, t0))
	for _, size := range [][2]int{{80, 12}, {200, 50}, {40, 6}} {
		m.Update(tea.WindowSizeMsg{Width: size[0], Height: size[1]})
		lines := strings.Split(m.View(), "\n")
		if len(lines) != size[1] {
			t.Errorf("%dx%d: %d lines", size[0], size[1], len(lines))
		}
		for _, l := range lines {
			if w := len([]rune(l)); w > size[0] {
				t.Errorf("%dx%d: line of %d: %q", size[0], size[1], w, l)
			}
		}
	}
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 30})
	last := synthetic(64, t0)
	m.Update(top.TurnMsg{At: t0.Add(2 * time.Second), Last: last, Err: &health.DisconnectedError{Server: "nats://127.0.0.1:4222", Status: "reconnecting"}})
	frame := m.View()
	golden.Check(t, "top-lost.txt", []byte(frame+"\n"))
	if !strings.Contains(frame, "lost the connection to nats://127.0.0.1:4222; reconnecting (reconnecting); figures from 14:05:00") || len(rowsOf(frame)) == 0 {
		t.Errorf("lost connection:\n%s", frame)
	}
	turn(m, synthetic(64, t0.Add(4*time.Second)))
	if frame := m.View(); strings.Contains(frame, "lost the connection") {
		t.Errorf("still lost after a report:\n%s", frame)
	}
}

// TestTopKeys: ? shows the keys and the actions; q and Ctrl-C quit.
func TestTopKeys(t *testing.T) {
	m := newModel(nil)
	turn(m, synthetic(4, t0))
	press(t, m, "?")
	frame := m.View()
	for _, want := range []string{"Keys", "filter: words, or lane:, key:, state:, instance:", "P       pause every lane of its design",
		"x       skip the selected lane's head: terminate or park it", "r       rewind the selected lane to a stream sequence or a time", "R       rewind every lane of its design"} {
		if !strings.Contains(frame, want) {
			t.Errorf("help lacks %q:\n%s", want, frame)
		}
	}
	for _, k := range []string{"q", "ctrl+c"} {
		m := newModel(nil)
		_, cmd := m.Update(keyMsg(k))
		if cmd == nil {
			t.Fatalf("%s: no command", k)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s does not quit", k)
		}
	}
}

// TestTopScroll16K: with 16,384 lanes the list scrolls to the last lane
// and draws only the rows on screen.
func TestTopScroll16K(t *testing.T) {
	m := newModel(nil)
	turn(m, synthetic(16384, t0))
	press(t, m, "s", "G")
	frame := m.View()
	rows := rowsOf(frame)
	if len(rows) == 0 || rows[len(rows)-1] != "orders-n16384-16383" || len(rows) > 30 {
		t.Errorf("end of 16,384 lanes: %v", rows)
	}
	if !strings.Contains(frame, "> orders-n16384-16383") {
		t.Errorf("cursor not on the last lane")
	}
}
