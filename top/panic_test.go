// bubbletea v1.3.10's panic path closes its input reader without waiting
// for the goroutine reading it (shutdown(true)): the race detector flags
// that inside the library, so this check runs without -race.

//go:build !race

package top

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// panicky panics on its first key press.
type panicky struct{}

func (panicky) Init() tea.Cmd { return nil }
func (panicky) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if _, ok := msg.(tea.KeyMsg); ok {
		panic("a bug in the view")
	}
	return panicky{}, nil
}
func (panicky) View() string { return "running" }

// TestPanicRestoresTheTerminal: with the options Run uses, bubbletea's
// own recovery catches a panic in the model, and the terminal is back in
// cooked mode with echo. (bubbletea prints the stack on stdout.)
func TestPanicRestoresTheTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	go io.Copy(io.Discard, ptmx)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := tea.NewProgram(panicky{}, programOptions(ctx, tty, tty)...)
	done := make(chan error, 1)
	go func() { _, err := p.Run(); done <- err }()
	// Raw mode first, then the key that panics.
	for {
		st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if st.Lflag&unix.ICANON == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the program never put the terminal in raw mode")
		case <-time.After(10 * time.Millisecond):
		}
	}
	ptmx.Write([]byte("x"))
	select {
	case err := <-done:
		if !errors.Is(err, tea.ErrProgramPanic) {
			t.Errorf("Run: %v, want a recovered panic", err)
		}
	case <-ctx.Done():
		t.Fatal("the panic did not end the program")
	}
	st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lflag&unix.ICANON == 0 || st.Lflag&unix.ECHO == 0 {
		t.Errorf("terminal not restored after the panic: lflag %#x", st.Lflag)
	}
}
