package top_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/top"
)

// TestTopPausesOnARealServer: the view reads a real server's lanes with
// inspect's snapshot, p asks (the dry run changes nothing), y pauses the
// selected lane with the actions package (recorded as by the user, from
// lanes top), the next refresh shows it paused, U resumes the design.
func TestTopPausesOnARealServer(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 2, 3)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := connect.Open(ctx, connect.Options{Server: srv.URL(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	o := health.Options{Stream: p.Stream.Name, Design: p.Design.Name}
	read := func() *health.Report {
		t.Helper()
		r, err := health.Inspect(ctx, conn, o)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m := top.New(top.Config{Stream: p.Stream.Name, Design: "orders", Server: conn.Server, Every: time.Second, By: "tester@host (lanes top)", Styles: render.PlainStyles()},
		&top.Live{Conn: conn, Ctx: ctx})
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 30})
	lane := p.Consumers[2].Durable
	// The server counts a lane's pending messages on its own time: wait
	// for the report to show the backlog (once, this read showed none).
	var r0 *health.Report
	testutil.WaitFor(t, "the backlog of "+lane, 30*time.Second, func() bool {
		r0 = read()
		return r0.Lane(lane).Backlog == 3
	})
	turn(m, r0)
	// The backlogged lane (partition 2) is on top; enter reads its head.
	press(t, m, "s", "s") // BACKLOG, largest first
	if rows := rowsOf(m.View()); len(rows) != 4 || rows[0] != lane {
		t.Fatalf("rows %v: want %s first\n%s", rows, lane, m.View())
	}
	press(t, m, "enter")
	if frame := m.View(); !strings.Contains(frame, "payload") || !strings.Contains(frame, "bytes: ") {
		t.Errorf("head not read:\n%s", frame)
	}
	press(t, m, "esc", "p")
	frame := m.View()
	if !strings.Contains(frame, "Pause lane "+lane+" of stream ORDERS?") || !strings.Contains(frame, lane+": running -> paused until resumed") {
		t.Fatalf("confirmation:\n%s", frame)
	}
	if r := read(); r.Summary.Paused != 0 {
		t.Fatalf("the dry run paused %d lanes", r.Summary.Paused)
	}
	press(t, m, "y")
	if frame := m.View(); !strings.Contains(frame, "pause: 1 lane paused ("+lane+")") {
		t.Fatalf("result:\n%s", frame)
	}
	r := read()
	l := r.Lane(lane)
	if r.Summary.Paused != 1 || !l.Paused || l.PausedBy == nil || l.PausedBy.By != "tester@host (lanes top)" {
		t.Fatalf("after y: %d paused, lane %+v", r.Summary.Paused, l.PausedBy)
	}
	turn(m, r)
	if frame := m.View(); !strings.Contains(frame, "paused") {
		t.Errorf("the refresh does not show the pause:\n%s", frame)
	}
	press(t, m, "U")
	if frame := m.View(); !strings.Contains(frame, "Resume every lane of design orders of stream ORDERS?") || !strings.Contains(frame, "It changes 1 lane") {
		t.Fatalf("resume confirmation:\n%s", frame)
	}
	press(t, m, "y")
	if r := read(); r.Summary.Paused != 0 {
		t.Errorf("%d lanes still paused after U y", r.Summary.Paused)
	}
}

// TestTopLostServer: a real server goes away under Run's watch: the
// turns carry the error (shown, the last figures kept), and the view
// gets figures again when the server is back.
func TestTopLostServer(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "orders", 2)
	natstest.CreateLanes(t, js, p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := connect.Dial(ctx, connect.Options{Server: srv.URL(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := top.New(top.Config{Stream: p.Stream.Name, Server: conn.Server, Every: 200 * time.Millisecond, Styles: render.PlainStyles()}, nil)
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 30})
	frames := make(chan string, 1)
	go health.Watch(ctx, conn, health.Options{Stream: p.Stream.Name}, 200*time.Millisecond, func(tt health.Turn) error {
		m.Update(top.TurnMsg(tt)) // one goroutine drives the model, as the program does
		select {
		case frames <- m.View():
		default:
		}
		return nil
	})
	wait := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case f := <-frames:
				if ok(f) {
					return
				}
			case <-deadline:
				t.Fatalf("no frame with %s", what)
			}
		}
	}
	wait("the lanes", func(f string) bool { return len(rowsOf(f)) == 2 && !strings.Contains(f, "lost") })
	up := srv.Down()
	wait("the lost connection and the last figures", func(f string) bool {
		return (strings.Contains(f, "lost the connection") || strings.Contains(f, "cannot read")) && len(rowsOf(f)) == 2
	})
	up()
	wait("fresh figures", func(f string) bool {
		return len(rowsOf(f)) == 2 && !strings.Contains(f, "lost the connection") && !strings.Contains(f, "cannot read")
	})
}
