package top_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/internal/golden"
)

func lacks(t *testing.T, what, frame string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(frame, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, frame)
		}
	}
}

// TestTopSkipConfirm: x on the stuck lane plans the skip (both dry runs,
// term and park) and states what will happen: the message's seq, subject,
// key, age and attempts, term or park, who settles it; t and p choose; n
// changes nothing; y skips as the user from lanes top and says the
// outcome; a skip recorded but not settled in time, a refusal and a
// park that is not possible are shown, and the view stays.
func TestTopSkipConfirm(t *testing.T) {
	b := &fakeBackend{}
	m := newModel(b)
	turn(m, synthetic(16, t0)) // the stuck lane, orders-n16-03, is on top
	press(t, m, "x")
	frame := m.View()
	golden.Check(t, "top-skip.txt", []byte(frame+"\n"))
	lacks(t, "skip confirmation", frame, "Skip seq 103 of lane orders-n16-03 (stream ORDERS)?",
		"seq 103, subject orders.received_from.n16.3.alice, key alice (serial lane: the lane's head)", "age 4m0s, attempts 4",
		"(*) t: terminate it", "( ) p: park it on dlq.orders", "done by   w2, the lanes work instance serving the lane", "asked by  ops@host (lanes top)",
		"y: terminate seq 103", "t: terminate it  p: park it  y: do it  n or esc: cancel")
	if strings.Join(b.acts, "\n") != "skip [orders-n16-03] seq=103 park=false dry=true by=ops@host (lanes top)\nskip [orders-n16-03] seq=103 park=true dry=true by=ops@host (lanes top)" {
		t.Errorf("dry runs: %q", b.acts)
	}
	press(t, m, "p")
	lacks(t, "park chosen", m.View(), "( ) t: terminate it", "(*) p: park it on dlq.orders", "y: park seq 103")
	press(t, m, "n")
	if len(b.acts) != 2 || !strings.Contains(m.View(), "skip cancelled: nothing changed") || len(rowsOf(m.View())) == 0 {
		t.Errorf("n: acts %q\n%s", b.acts, m.View())
	}

	press(t, m, "x", "p", "y")
	if last := b.acts[len(b.acts)-1]; last != "skip [orders-n16-03] seq=103 park=true dry=false by=ops@host (lanes top)" {
		t.Errorf("y ran %q", last)
	}
	lacks(t, "outcome", m.View(), "skip: seq 103 of lane orders-n16-03 parked on dlq.orders by w2")

	b.skipErr = &actions.SkipPendingError{}
	press(t, m, "x", "y")
	lacks(t, "pending", m.View(), "skip of seq 103 on lane orders-n16-03 recorded, not settled yet", "LANE")

	b.skipErr = errors.New("lane orders-n16-03 has moved past seq 103 (its ack floor is seq 103): nothing to skip, nothing changed")
	press(t, m, "x", "y")
	lacks(t, "refused", m.View(), "skip seq 103 of lane orders-n16-03: lane orders-n16-03 has moved past seq 103", "LANE")

	// No dead-letter subject: park is not possible, y on it does nothing,
	// t then y terminates.
	b.skipErr, b.parkErr = nil, errors.New("--park: no dead-letter subject is known for design \"orders\"")
	n := len(b.acts)
	press(t, m, "x", "p", "y")
	frame = m.View()
	lacks(t, "park refused", frame, "( ) p: park it: not possible: --park: no dead-letter subject is known", "Skip seq 103")
	if len(b.acts) != n+2 {
		t.Errorf("y on an impossible park ran: %q", b.acts[n:])
	}
	press(t, m, "t", "y")
	lacks(t, "term", m.View(), "skip: seq 103 of lane orders-n16-03 terminated by w2")

	// A lane with nothing waiting has no head to skip.
	press(t, m, "G")
	press(t, m, "x")
	lacks(t, "no head", m.View(), "has no head message to skip")
}

// TestTopRewindConfirm: r asks for the point (a sequence, a clock time,
// a duration ago, as lanes rewind takes them); the confirmation is the
// dry run, lane by lane (position now, after, messages that run again);
// y rewinds to the sequence the dry run named; R takes every lane of the
// design; bad points are said and nothing is asked of the server.
func TestTopRewindConfirm(t *testing.T) {
	b := &fakeBackend{}
	m := newModel(b)
	turn(m, synthetic(16, t0))
	press(t, m, "r")
	lacks(t, "prompt", m.View(), "rewind lane orders-n16-03 to (a stream sequence, 13:55, 15m ago): ", "enter: see what it would do (nothing changes yet)")
	press(t, m, "95", "enter")
	frame := m.View()
	golden.Check(t, "top-rewind.txt", []byte(frame+"\n"))
	lacks(t, "rewind confirmation", frame, "Rewind lane orders-n16-03 of stream ORDERS to seq 95?", "It rewinds 1 lane; 13 messages run again (by ops@host (lanes top))",
		"orders-n16-03: ack floor 102, delivered 103 -> restarts at seq 95 (ack floor 94), 13 messages again", "y: rewind 1 lane")
	press(t, m, "y")
	if last := b.acts[len(b.acts)-1]; len(b.acts) != 2 || last != "rewind [orders-n16-03] seq=95 time=false dry=false" {
		t.Errorf("acts %q", b.acts)
	}
	lacks(t, "outcome", m.View(), "rewind: 1 lane rewound to seq 95 (orders-n16-03); 13 messages run again")

	// Every lane of the design, to a time: the rewind goes to the
	// sequence its dry run found for it.
	press(t, m, "R", "15m ago", "enter")
	frame = m.View()
	lacks(t, "design rewind", frame, "Rewind every lane of design orders of stream ORDERS to ", "(seq 90, the first message stored since)?",
		"orders-n16-00: ack floor 99, delivered 99 -> as it is (delivered nothing at or after the point: left as it is)", "y: rewind 1 lane")
	press(t, m, "y")
	if last := b.acts[len(b.acts)-1]; last != "rewind [] seq=90 time=false dry=false" || b.acts[len(b.acts)-2] != "rewind [] seq=0 time=true dry=true" {
		t.Errorf("acts %q", b.acts)
	}

	// Bad points, a cancelled prompt: nothing asked of the server.
	n := len(b.acts)
	for point, want := range map[string]string{
		"tomorrow":             "rewind to tomorrow: not a point: give a stream sequence (1042)",
		"0":                    "rewind to 0: stream sequences start at 1",
		"2999-01-01T00:00:00Z": "is in the future",
	} {
		press(t, m, "r", point, "enter")
		lacks(t, "point "+point, m.View(), want)
	}
	press(t, m, "r", "12", "esc")
	if len(b.acts) != n || strings.Contains(m.View(), "Rewind lane") {
		t.Errorf("bad points or esc asked the server: %q", b.acts[n:])
	}

	// An error of the rewind itself is shown; from the lane view, the
	// confirmation returns to it.
	b.rewindErr = errors.New("another lanes apply or rewind is acting on stream ORDERS")
	press(t, m, "enter", "r", "95", "enter")
	lacks(t, "from the lane view", m.View(), "Rewind lane orders-n16-03")
	press(t, m, "y")
	lacks(t, "rewind error", m.View(), "rewind lane orders-n16-03 to seq 95: another lanes apply or rewind is acting on stream ORDERS", "Lane orders-n16-03")
}

// TestTopParkedPane: the lane view reads the lane's parked messages when
// it opens and at each refresh (seq, origin, key, attempts, age, reason,
// escaped), at most what the screen holds, and shows a failed read in the
// pane.
func TestTopParkedPane(t *testing.T) {
	b := &fakeBackend{parkedCount: 1}
	m := newModel(b)
	turn(m, synthetic(16, t0))
	press(t, m, "enter")
	lacks(t, "lane view", m.View(), "parked    1 message from this lane on dlq.orders (stream DLQ):", "seq 7 (was 40), key bob0, 5 attempts, age 10m00s: failed")
	b.parkedCount = 3
	turn(m, synthetic(16, t0.Add(2*time.Second)))
	lacks(t, "after a refresh", m.View(), "parked    3 messages from this lane", "seq 9 (was 42), key bob2")
	if b.parkedReads != 2 {
		t.Errorf("%d reads, want one when the view opened and one at the refresh", b.parkedReads)
	}
	b.parkedCount = 40
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 28})
	turn(m, synthetic(16, t0.Add(4*time.Second)))
	frame := m.View()
	lacks(t, "many parked", frame, "parked    40 messages from this lane", "earlier (lanes parked list --lanes orders-n16-03)", "seq 46 (was 79), key bob39")
	if lines := strings.Split(frame, "\n"); len(lines) != 28 || !strings.Contains(lines[27], "esc: back") {
		t.Errorf("the parked messages pushed the keys off the screen:\n%s", frame)
	}
	b.parkedErr = errors.New("reading dead-letter subject dlq.orders (stream DLQ): nats: timeout")
	turn(m, synthetic(16, t0.Add(6*time.Second)))
	lacks(t, "read error", m.View(), "parked    cannot read them: reading dead-letter subject dlq.orders (stream DLQ): nats: timeout", "Lane orders-n16-03")
}

// TestTopKeyPosition: l shows, beside the key's lane, its last message
// there (a last-by-subject get of the stored subject) and whether the
// lane is done with it or it waits, above the ack floor, beside the
// lane's head.
func TestTopKeyPosition(t *testing.T) {
	r := synthetic(16, t0)
	// A key whose lane has a head, and its lane.
	var key, lane string
	for i := 0; key == ""; i++ {
		places, err := r.Locate(fmt.Sprintf("u%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if l := r.Lane(places[0].Lanes[0]); l.Head != nil && l.Name != "orders-n16-03" && l.Name != "orders-n16-05" {
			key, lane = places[0].Key, l.Name
		}
	}
	l := r.Lane(lane)
	b := &fakeBackend{lastSeq: l.Head.Seq}
	m := newModel(b)
	turn(m, r)
	press(t, m, "l", key, "enter")
	lacks(t, "key at the head", m.View(), "Lane "+lane, fmt.Sprintf("last      lane %s: seq %d, stored 14:04:00: waiting (the ack floor is seq %d); it is the lane's head", lane, l.Head.Seq, l.AckFloorSeq))
	b.lastSeq = l.Head.Seq + 5
	press(t, m, "esc", "l", key, "enter")
	lacks(t, "key behind the head", m.View(), fmt.Sprintf("seq %d, stored 14:04:00: waiting (the ack floor is seq %d); the head is seq %d, key %s", l.Head.Seq+5, l.AckFloorSeq, l.Head.Seq, l.Head.Key))
	b.lastSeq = l.AckFloorSeq
	press(t, m, "esc", "l", key, "enter")
	lacks(t, "key done", m.View(), fmt.Sprintf("seq %d, stored 14:04:00: done (the ack floor is seq %d)", l.AckFloorSeq, l.AckFloorSeq))
	press(t, m, "esc", "l", "k9", "enter")
	lacks(t, "key never stored", m.View(), "no message of the key is stored on orders.received_from.n16.")
}
