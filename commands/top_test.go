package commands_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestTopNeedsATerminal: without a terminal lanes top refuses (exit 2)
// and points to inspect --watch.
func TestTopNeedsATerminal(t *testing.T) {
	cleanEnv(t)
	code, _, errs := lanes(t, "top", "--stream", "ORDERS", "--server", "nats://127.0.0.1:1")
	if code != commands.ExitUsage || !strings.Contains(errs, "lanes inspect --watch") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestTopHelp: lanes top --help names every action's key.
func TestTopHelp(t *testing.T) {
	cleanEnv(t)
	code, out, _ := lanes(t, "top", "--help")
	for _, want := range []string{"pause, resume, skip a stuck head, rewind", "skips the lane's head (t: terminate, p: park", "r rewinds", "R every lane of its design", "(1042, 13:55, 15m ago"} {
		if !strings.Contains(out, want) {
			t.Errorf("top --help lacks %q (exit %d):\n%s", want, code, out)
		}
	}
}

// screen is what a child wrote to its terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestTopInATerminal runs lanes top (this test binary re-executed with
// LANES_ARGS) in a real pseudo-terminal against a real server: the
// screen shows the lanes, the password in the URL is not on it, the
// terminal is raw while it runs, and q ends it with exit 0, the
// alternate screen left and the terminal back in cooked mode with echo.
func TestTopInATerminal(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 2)...)
	url := strings.Replace(srv.URL(), "nats://", "nats://ops:s3cr3t-pw@", 1)

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	argv, _ := json.Marshal([]string{"top", "--stream", p.Stream.Name, "--server", url, "--interval", "500ms"})
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv), "TERM=xterm-256color")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out screen
	go func() { _, _ = io.Copy(&out, ptmx) }() // until the terminal closes
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	answered := false
	testutil.WaitFor(t, "the lanes on screen", 30*time.Second, func() bool {
		s := out.String()
		if !answered && strings.Contains(s, "\x1b[6n") {
			// Answer the colour query (background colour, cursor
			// position) as a terminal does: lipgloss waits 5s for it.
			answered = true
			ptmx.Write([]byte("\x1b]11;rgb:0000/0000/0000\x1b\\\x1b[1;1R"))
		}
		return strings.Contains(s, p.Consumers[1].Durable) && strings.Contains(s, p.Consumers[3].Durable)
	})
	if st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || st.Lflag&unix.ICANON != 0 {
		t.Errorf("the terminal is not raw while lanes top runs (lflag %#x, %v)", st.Lflag, err)
	}
	t.Logf("lanes on screen after %s", time.Since(begin))
	if _, err := ptmx.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lanes top ended with %v; screen:\n%q", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("q did not end lanes top; screen:\n%q", out.String())
	}
	t.Logf("exited after %s", time.Since(begin))
	st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lflag&unix.ICANON == 0 || st.Lflag&unix.ECHO == 0 {
		t.Errorf("terminal not restored to cooked mode with echo: lflag %#x", st.Lflag)
	}
	testutil.WaitFor(t, "the alternate screen left", 10*time.Second, func() bool { return strings.Contains(out.String(), "\x1b[?1049l") })
	s := out.String()
	if !strings.Contains(s, "\x1b[?1049h") {
		t.Errorf("the alternate screen was never entered")
	}
	if strings.Contains(s, "s3cr3t-pw") {
		t.Errorf("the password is on screen")
	}
}
