package commands_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/commands"
)

// startLanes runs lanes in a child process (see TestMain) with its output
// captured.
func startLanes(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &stderr
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
// client waits for its INFO until the connect timeout.
func hungServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return "nats://" + ln.Addr().String()
}

// TestSignalWhileConnecting: SIGTERM and SIGINT stop a command that waits
// for a server that never answers, at once and with exit 130, not after the
// connect timeout with a connection error.
func TestSignalWhileConnecting(t *testing.T) {
	url := hungServer(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, stderr := startLanes(t, "inspect", "--stream", "ORDERS", "-s", url, "--timeout", "30s")
			time.Sleep(500 * time.Millisecond) // connecting
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
