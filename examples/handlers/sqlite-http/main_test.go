package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestMain lets a test run `lanes work` as a process of its own (this test
// binary re-executed with LANES_ARGS), so that it can be killed with
// SIGKILL or stopped with SIGTERM as an operator would.
func TestMain(m *testing.M) {
	if args := os.Getenv("LANES_ARGS"); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			panic(err)
		}
		os.Exit(commands.Main(append([]string{"lanes"}, argv...), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// startLanes runs lanes ARGS in a process of its own; its stderr is shown
// if the test fails.
func startLanes(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	argv, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s's stderr:\n%s", name, stderr.String())
		}
	})
	return cmd
}

// stop sends SIGTERM and returns the exit code; -1 if it had to be killed.
func stop(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("lanes work did not stop within 30s of SIGTERM")
		return -1
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
