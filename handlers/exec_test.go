//go:build unix

package handlers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/work"
)

// TestExecShell: the command runs as sh -c (stdin, exit codes, no
// positional parameters, its own wait and exec) in a process group led by
// its keeper; once it is done nothing but the keeper is left in the group,
// which the next message uses. A group killed with its keeper is replaced.
func TestExecShell(t *testing.T) {
	needProc(t)
	dir := t.TempDir()
	var out bytes.Buffer
	h := &Exec{Command: `read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid > "$GROUP_FILE"; eval "$CASE"`, Stdout: &out}
	groups := map[int]bool{}
	for i, tc := range []struct {
		name, command string
		err           string // "" for success
		out           string
	}{
		{"stdin and exit 0", `cat; echo " #$#:$1"`, "", "payload #0:\n"},
		{"exit code", `exit 7`, "exit 7", ""},
		{"term", `exit 65`, "terminate: exit 65", ""},
		{"wait for its own children", `sleep 0.1 & wait; echo waited`, "", "waited\n"},
		{"exec", `exec sh -c 'echo exec; exit 3'`, "exit 3", "exec\n"},
		{"not found: an outage", `nosuch-lanes-program`, "the handler could not run: exit 127, command not found", ""},
		{"killed with its group", `sleep 0.1 & exec kill -KILL 0`, "signal: killed", ""},
		{"after a killed group", `echo again`, "", "again\n"},
	} {
		out.Reset()
		group := filepath.Join(dir, strconv.Itoa(i))
		h.Env = append(os.Environ(), "GROUP_FILE="+group, "CASE="+tc.command)
		start := time.Now()
		err := h.Handle(context.Background(), &work.Msg{Data: []byte("payload")})
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: took %s", tc.name, took)
		}
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: error %v, want none", tc.name, err)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
		if out.String() != tc.out {
			t.Errorf("%s: stdout %q, want %q", tc.name, out.String(), tc.out)
		}
		b, _ := os.ReadFile(group)
		pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		groups[pgid] = true
		testutil.WaitFor(t, tc.name+": the process group holding its keeper at most", 5*time.Second, func() bool {
			live := liveInGroup(pgid)
			return pgid > 0 && (len(live) == 0 || len(live) == 1 && live[0] == pgid)
		})
	}
	if len(groups) != 2 {
		t.Errorf("the messages ran in %d process groups, want 2: one kept for all, one after the kill", len(groups))
	}
}

// needProc skips a test that reads processes from /proc where there is none.
func needProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("the test reads process groups from /proc")
	}
}

// liveInGroup lists the live processes (zombies excluded) of a process
// group, from /proc (empty where there is none).
func liveInGroup(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:])) // state, ppid, pgrp, ...
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, pid)
		}
	}
	return out
}

// TestCheckCommand: a command line's first program is looked for at start
// when it can be told without running the line; anything the shell would
// expand or run itself is left to it.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "handle.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "plain.txt"), []byte("x"), 0o644)
	t.Chdir(dir)
	for _, tc := range []struct {
		command string
		err     string // "" for no error
	}{
		{"cat", ""},
		{"./handle.sh --x", ""},
		{"exec ./handle.sh", ""},
		{"A=1 B=two ./handle.sh", ""},
		{"nosuch-lanes-program --flag", "nosuch-lanes-program: not found on PATH"},
		{"A=1 nosuch-lanes-program", "nosuch-lanes-program: not found on PATH"},
		{"exec nosuch-lanes-program", "nosuch-lanes-program: not found on PATH"},
		{"nosuch-lanes-program;true", "nosuch-lanes-program: not found on PATH"},
		{"./nosuch.sh", "./nosuch.sh: no such file"},
		{"./plain.txt", "./plain.txt: not an executable file"},
		{dir, "not an executable file"},
		// left to the shell
		{"cd /tmp && nosuch-lanes-program", ""},
		{"echo hi", ""},
		{"if true; then nosuch-lanes-program; fi", ""},
		{`"$HANDLER" x`, ""},
		{"$HANDLER", ""},
		{"~/bin/handle", ""},
		{"PATH=/nowhere nosuch-lanes-program", ""},
		{"(nosuch-lanes-program)", ""},
		{"{ nosuch-lanes-program; }", ""},
		{"! nosuch-lanes-program", ""},
		{"exec -a x nosuch-lanes-program", ""},
	} {
		err := CheckCommand(tc.command)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckCommand(%q) = %v, want %q", tc.command, err, tc.err)
		}
	}
}

// TestExecGroupIdle: a process group unused for a while is ended:
// its keeper exits (without killing anything).
func TestExecGroupIdle(t *testing.T) {
	needProc(t)
	defer func(d time.Duration) { groupIdle = d }(groupIdle)
	groupIdle = 200 * time.Millisecond
	group := filepath.Join(t.TempDir(), "group")
	h := &Exec{Command: `read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid > ` + group}
	if err := h.Handle(context.Background(), &work.Msg{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(group)
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if live := liveInGroup(pgid); len(live) != 1 {
		t.Fatalf("group %d: %v live, want its keeper", pgid, live)
	}
	testutil.WaitFor(t, "the keeper gone", 5*time.Second, func() bool { return len(liveInGroup(pgid)) == 0 })
}
