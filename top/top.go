// Package top is lanes top: a full-screen view of a stream's lanes for an
// operator at a terminal, refreshed from the same health snapshot that
// lanes inspect prints (health.Watch: Read, then Judge), with the actions
// of the actions package a keystroke away.
//
// The view is a bubbletea model (Model) driven by messages: a refresh
// (TurnMsg), key presses, the terminal's size, and the answers of the
// Backend (a head message, a lane's parked messages, a key's last
// message, an action's dry run and its outcome).
// Run wires it to a live connection; tests drive it with messages.
package top

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/render"
)

// Options are everything Run needs.
type Options struct {
	Conn   *connect.Conn
	Health health.Options // the stream, design and design file, as inspect takes them
	Every  time.Duration  // refresh interval
	By     string         // who acts, recorded with a pause: "user@host (lanes top)"
	In     io.Reader      // the terminal
	Out    io.Writer
	Err    io.Writer // where a crash is reported, after the terminal is restored
}

// Run shows the view until the user quits (q, Ctrl-C) or ctx ends. The
// lanes are read by health.Watch in the background, every o.Every; a
// lost connection or a failed read is shown and retried. Only what
// health.Watch cannot outlive (a wrong setting, credentials,
// permissions) ends the view with an error.
func Run(ctx context.Context, o Options) error {
	design := o.Health.Design
	if design == "" && o.Health.Plan != nil {
		design = o.Health.Plan.Design.Name
	}
	m := New(Config{
		Stream: o.Health.Stream, Design: design, Server: o.Conn.Server,
		Every: o.Every, By: o.By, Styles: render.NewStyles(o.Out),
	}, &Live{Conn: o.Conn, Ctx: ctx})
	p := tea.NewProgram(m, programOptions(ctx, o.In, o.Out)...)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	var watchErr, crash error
	go func() {
		defer close(done)
		// A panic here is not bubbletea's to catch: restore the
		// terminal (Kill) and report it once the screen is back.
		defer func() {
			if r := recover(); r != nil {
				crash = fmt.Errorf("lanes top crashed: %v\n%s", r, debug.Stack())
				p.Kill()
			}
		}()
		watchErr = health.Watch(wctx, o.Conn, o.Health, o.Every, func(t health.Turn) error {
			p.Send(TurnMsg(t))
			return nil
		})
		if watchErr != nil {
			p.Send(fatalMsg{watchErr})
		}
	}()
	_, err := p.Run()
	stop()
	<-done
	switch {
	case crash != nil:
		return crash
	case watchErr != nil:
		return watchErr
	case errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil:
		return ctx.Err() // interrupted (SIGTERM, SIGHUP): the caller says so
	}
	return err
}

// programOptions: the alternate screen (the shell's screen comes back as
// it was), the given terminal, and bubbletea's own panic recovery (left
// on: a panic in the model restores the terminal before the stack is
// printed). ctx ending stops the program and restores the terminal too.
func programOptions(ctx context.Context, in io.Reader, out io.Writer) []tea.ProgramOption {
	return []tea.ProgramOption{tea.WithAltScreen(), tea.WithInput(in), tea.WithOutput(out), tea.WithContext(ctx)}
}

// fatalMsg: the watch ended with an error it cannot outlive.
type fatalMsg struct{ err error }
