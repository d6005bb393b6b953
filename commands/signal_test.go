package commands_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// startLanes runs lanes in a child process (see TestMain) with its
// stderr captured, readable while it runs.
func startLanes(t *testing.T, args ...string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	c := startChild(t, nil, nil, args...)
	return c.cmd, c.stderr
}

// waitExit waits for the child to exit within limit and returns its code.
func waitExit(t *testing.T, cmd *exec.Cmd, limit time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(limit):
		t.Fatalf("lanes did not exit within %s", limit)
		return -1
	}
}

// hungServer accepts TCP connections and never says anything: a NATS
// client waits for its INFO until the connect timeout. connected receives
// each connection as it is accepted: a child that connected is in Main,
// its signal handling set up, waiting for the server.
func hungServer(t *testing.T) (url string, connected <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	return "nats://" + ln.Addr().String(), accepted
}

// waitConnected waits until the child's connection reached hungServer.
func waitConnected(t *testing.T, connected <-chan struct{}, stderr fmt.Stringer) {
	t.Helper()
	select {
	case <-connected:
	case <-time.After(30 * time.Second):
		t.Fatalf("lanes never connected; stderr: %s", stderr)
	}
}

// stopSignals are the signals every command treats as a stop: SIGHUP (a
// closed terminal, a dropped ssh session) as SIGTERM does.
var stopSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// TestSignalWhileConnecting: SIGTERM, SIGINT and SIGHUP stop a command
// that waits for a server that never answers, at once and with exit 130,
// not after the connect timeout with a connection error.
func TestSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	for _, sig := range stopSignals {
		t.Run(sig.String(), func(t *testing.T) {
			url, connected := hungServer(t)
			cmd, stderr := startLanes(t, "inspect", "--stream", "ORDERS", "-s", url, "--timeout", "30s")
			waitConnected(t, connected, stderr)
			sent := time.Now()
			cmd.Process.Signal(sig)
			code := waitExit(t, cmd, 5*time.Second)
			if code != commands.ExitInterrupted {
				t.Errorf("exit %d, want %d; stderr: %s", code, commands.ExitInterrupted, stderr)
			}
			if took := time.Since(sent); took > time.Second {
				t.Errorf("took %s to stop", took)
			}
			if !strings.Contains(stderr.String(), "interrupted by") || strings.Contains(stderr.String(), "context canceled") {
				t.Errorf("stderr should say it was interrupted, in words: %q", stderr)
			}
		})
	}
}

// child is lanes in a child process with its stdin, environment and
// stderr under the test's control.
type child struct {
	cmd    *exec.Cmd
	stderr *testutil.Buffer
}

func startChild(t *testing.T, stdin *os.File, env []string, args ...string) *child {
	t.Helper()
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(append(os.Environ(), env...), "LANES_ARGS="+string(argv))
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return &child{cmd: cmd, stderr: &stderr}
}

// waitBlocked waits until one of the child's threads sleeps in the kernel
// in a function named like one of where (/proc/PID/task/*/wchan): e.g.
// wait_for_partner (open(2) of a FIFO without a writer) or pipe_read.
// Without /proc there is no telling where the child is, and a signal
// sent too early would prove nothing: the test is skipped.
func (c *child) waitBlocked(t *testing.T, where ...string) {
	t.Helper()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid)); err != nil {
		t.Skip("no /proc to see where lanes blocks:", err)
	}
	testutil.WaitFor(t, fmt.Sprintf("lanes blocked in %v (stderr: %s)", where, c.stderr), 30*time.Second, func() bool {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", c.cmd.Process.Pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, w := range where {
				if strings.Contains(string(b), w) {
					return true
				}
			}
		}
		return false
	})
}

// interrupt sends sig and checks that lanes exits 130 within a second,
// saying it was interrupted.
func (c *child) interrupt(t *testing.T, sig syscall.Signal) {
	t.Helper()
	sent := time.Now()
	c.cmd.Process.Signal(sig)
	code := waitExit(t, c.cmd, 10*time.Second)
	if took := time.Since(sent); took > time.Second {
		t.Errorf("took %s to stop after %s", took, sig)
	}
	if code != commands.ExitInterrupted {
		t.Errorf("exit %d, want %d; stderr: %s", code, commands.ExitInterrupted, c.stderr)
	}
	if !strings.Contains(c.stderr.String(), "interrupted by") || strings.Contains(c.stderr.String(), "context canceled") {
		t.Errorf("stderr should say it was interrupted, in words: %q", c.stderr)
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs:", err)
	}
	return fifo
}

// TestSignalWhileReading: every command blocked in a read stops at the
// first SIGTERM, SIGINT or SIGHUP, with exit 130: blocked in open(2) of a FIFO no
// one writes to, or in read(2) of a pipe that stays open and silent.
func TestSignalWhileReading(t *testing.T) {
	t.Parallel()
	design := "../examples/seed/lanes.yaml"
	cases := []struct {
		name  string
		stdin bool   // a pipe that stays open
		where string // the kernel function the read blocks in
		args  func(fifo string) []string
	}{
		{"plan --keys FIFO", false, "wait_for_partner", func(f string) []string { return []string{"plan", "-f", design, "--keys", f} }},
		{"plan --keys FIFO -o json", false, "wait_for_partner", func(f string) []string { return []string{"plan", "-f", design, "--keys", f, "-o", "json"} }},
		{"plan --keys - (pipe)", true, "pipe_read", func(string) []string { return []string{"plan", "-f", design, "--keys", "-"} }},
		{"plan -f FIFO", false, "wait_for_partner", func(f string) []string { return []string{"plan", "-f", f} }},
		{"plan -f - (pipe)", true, "pipe_read", func(string) []string { return []string{"plan", "-f", "-"} }},
		{"inspect -f FIFO", false, "wait_for_partner", func(f string) []string { return []string{"inspect", "-f", f, "-s", "nats://127.0.0.1:1"} }},
		{"simulate --keys file:FIFO", false, "wait_for_partner", func(f string) []string { return []string{"simulate", "-f", design, "--keys", "file:" + f} }},
		{"simulate -f FIFO", false, "wait_for_partner", func(f string) []string { return []string{"simulate", "-f", f} }},
		{"apply -f FIFO", false, "wait_for_partner", func(f string) []string { return []string{"apply", "-f", f, "-s", "nats://127.0.0.1:1"} }},
	}
	for _, tc := range cases {
		for _, sig := range stopSignals {
			t.Run(tc.name+"/"+sig.String(), func(t *testing.T) {
				t.Parallel()
				var stdin *os.File
				if tc.stdin {
					r, w, err := os.Pipe()
					if err != nil {
						t.Fatal(err)
					}
					defer w.Close()
					defer r.Close()
					stdin = r
					w.WriteString("alice\n") // a line, then silence: a trickling pipe
				}
				c := startChild(t, stdin, nil, tc.args(mkfifo(t))...)
				c.waitBlocked(t, tc.where)
				c.interrupt(t, sig)
			})
		}
	}
}

// TestSignalWhileApplyConnects: apply waiting for a server that never
// answers stops at SIGTERM, and at SIGHUP alike, with exit 130.
func TestSignalWhileApplyConnects(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			url, connected := hungServer(t)
			c := startChild(t, nil, nil, "apply", "--yes", "-f", "../examples/seed/lanes.yaml", "-s", url, "--timeout", "30s")
			waitConnected(t, connected, c.stderr)
			c.interrupt(t, sig)
		})
	}
}

// TestSignalInspectWatch: inspect --watch stops at SIGTERM, and at SIGHUP
// alike, with exit 130 and the word of what stopped it.
func TestSignalInspectWatch(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			argv, _ := json.Marshal([]string{"inspect", "--stream", "NOPE", "-s", srv.URL(), "--watch", "200ms"})
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
			var stdout, stderr testutil.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			c := &child{cmd: cmd, stderr: &stderr}
			testutil.WaitFor(t, "the watch's first report", 30*time.Second, func() bool { return strings.Contains(stdout.String(), "NOPE") })
			c.interrupt(t, sig)
		})
	}
}

// TestSpoolLeftBehind: plan --keys - -o json spools what it reads; the
// spool has no name in the temporary directory, so neither SIGTERM nor
// SIGKILL leaves anything behind.
func TestSpoolLeftBehind(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			defer r.Close()
			w.WriteString(strings.Repeat("alice\nbob\n", 1000))
			c := startChild(t, r, []string{"TMPDIR=" + tmp}, "plan", "-f", "../examples/seed/lanes.yaml", "--keys", "-", "-o", "json")
			c.waitBlocked(t, "pipe_read")
			// The spool is open: a file in tmp with no name.
			spooled := false
			fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", c.cmd.Process.Pid))
			for _, fd := range fds {
				if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, tmp) && strings.HasSuffix(target, "(deleted)") {
					spooled = true
				}
			}
			if len(fds) > 0 && !spooled {
				t.Fatal("no spool file open in TMPDIR")
			}
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Fatalf("the spool has a name in TMPDIR while running: %v", entries)
			}
			c.cmd.Process.Signal(sig)
			waitExit(t, c.cmd, 10*time.Second)
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Fatalf("left behind after %s: %v", sig, entries)
			}
		})
	}
}
