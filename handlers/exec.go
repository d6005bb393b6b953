package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// TermExitCode is the exit code with which an --exec handler says the
// message must not be retried (EX_DATAERR in sysexits.h: the input data
// was incorrect): it is terminated, or parked when a dead-letter subject
// is set.
const TermExitCode = 65

// EnvHeaderPrefix prefixes the environment variables that carry the
// message's headers: header Trace-Id is LANES_HEADER_TRACE_ID.
const EnvHeaderPrefix = "LANES_HEADER_"

// Env is the environment an --exec handler gets for m, besides the
// inherited one: LANES_STREAM, LANES_LANE, LANES_PARTITION, LANES_SUBJECT,
// LANES_KEY, LANES_SEQ, LANES_ATTEMPT, LANES_PUBLISHED (RFC 3339),
// LANES_INSTANCE, and one LANES_HEADER_<NAME> per header (the name upper
// case, characters other than letters and digits as '_', several values
// joined by ',').
func Env(m *work.Msg) []string {
	env := []string{
		"LANES_STREAM=" + m.Stream,
		"LANES_LANE=" + m.Lane,
		"LANES_PARTITION=" + strconv.Itoa(m.Partition),
		"LANES_SUBJECT=" + m.Subject,
		"LANES_KEY=" + m.Key,
		"LANES_SEQ=" + strconv.FormatUint(m.Seq, 10),
		"LANES_ATTEMPT=" + strconv.Itoa(m.Attempt),
		"LANES_PUBLISHED=" + m.Published.UTC().Format(time.RFC3339Nano),
		"LANES_INSTANCE=" + m.Instance,
	}
	for name, values := range m.Header {
		env = append(env, EnvHeaderPrefix+envName(name)+"="+strings.Join(values, ","))
	}
	return env
}

func envName(header string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, header)
}

// Exec runs `sh -c Command` per message: the payload on stdin, the
// message's metadata and headers in the environment (see Env). Exit 0
// acks, TermExitCode terminates, anything else retries. When the context
// ends (max process time, stop) the command's whole process group is
// killed. On unix systems the process group is also killed when the
// worker's process ends, however it ends (kill -9 included): a handler
// never runs on beside its message's redelivery (see keeperScript).
type Exec struct {
	Command string
	Shell   string    // default "sh"; a POSIX shell
	Stdout  io.Writer // the handlers' output, shared (writes are serialised; an *os.File is passed as it is)
	Stderr  io.Writer // also kept (the last 1 KB) as the error of a failure
	Env     []string  // the inherited environment; default os.Environ()
	once    sync.Once
	out     io.Writer
	errw    io.Writer
	groups  groups // the handlers' process groups
}

func (h *Exec) init() {
	if h.Shell == "" {
		h.Shell = "sh"
	}
	if h.Env == nil {
		h.Env = os.Environ()
	}
	h.out = lockedWriter(h.Stdout)
	h.errw = lockedWriter(h.Stderr)
}

// Handle runs the command for one message.
func (h *Exec) Handle(ctx context.Context, m *work.Msg) error {
	h.once.Do(h.init)
	env := append(append(make([]string, 0, len(h.Env)+16), h.Env...), Env(m)...)
	tail := &tailBuffer{max: 1024}
	stderr := io.Writer(tail)
	if h.errw != nil {
		stderr = io.MultiWriter(h.errw, tail)
	}
	cmd, done, err := h.start(func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, h.Shell, "-c", h.Command)
		cmd.Stdin = bytes.NewReader(m.Data)
		cmd.Env = env
		cmd.Stdout = h.out
		cmd.Stderr = stderr
		cmd.WaitDelay = 2 * time.Second // a grandchild keeping stderr open must not hold the lane
		return cmd
	})
	if err != nil {
		return work.Outage(err) // no shell
	}
	err = cmd.Wait()
	done()
	if err == nil {
		return nil
	}
	if broken := CheckOutput(h.out); broken != nil {
		return work.Outage(fmt.Errorf("%w (the handler failed: %v)", broken, err))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch code := ee.ExitCode(); code {
		case TermExitCode:
			return work.Term(fmt.Errorf("exit %d%s", TermExitCode, tail.suffix()))
		case 126, 127:
			// The shell could not run the command: found but not
			// executable, or not found. Nothing of the message was done.
			return work.Outage(fmt.Errorf("exit %d, %s%s", code, shellFailure[code], tail.suffix()))
		case -1: // a signal
		default:
			return fmt.Errorf("exit %d%s", code, tail.suffix())
		}
	}
	return fmt.Errorf("%w%s", err, tail.suffix())
}

// shellFailure: what sh's exit codes 126 and 127 mean.
var shellFailure = map[int]string{126: "the command is not executable", 127: "command not found"}

// CheckCommand looks for the program an --exec command line runs first,
// where that can be told without running it: the line's first word, after
// NAME=value assignments and exec, when it is a plain word (no quotes,
// expansions, globs or operators) and no shell keyword or builtin. A name
// must be found on PATH; a path must be an executable file. Anything else
// is left to the shell. An error says what is missing.
func CheckCommand(command string) error {
	words := strings.Fields(command)
	for i, word := range words {
		end := strings.IndexAny(word, ";&|<>()")
		if end >= 0 {
			word = word[:end]
		}
		switch {
		case word == "" || strings.ContainsAny(word, "'\"\\$`*?[]{}~#!"):
			return nil // an operator, or something the shell expands
		case assignment.MatchString(word) && end < 0:
			if strings.HasPrefix(word, "PATH=") {
				return nil
			}
			continue
		case word == "exec" && end < 0 && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-"):
			continue
		case shellWords[word]:
			return nil
		}
		_, err := exec.LookPath(word)
		switch {
		case errors.Is(err, exec.ErrDot):
			return nil // found in the current directory, which sh searches too
		case err != nil && strings.Contains(word, "/"):
			shown := planner.Printable(word, 64)
			if _, serr := os.Stat(word); serr != nil {
				return fmt.Errorf("%s: no such file", shown)
			}
			return fmt.Errorf("%s: not an executable file (chmod +x it, or run it with sh %s)", shown, shown)
		case err != nil:
			return fmt.Errorf("%s: not found on PATH (%s)", planner.Printable(word, 64), planner.Printable(os.Getenv("PATH"), 256))
		}
		return nil
	}
	return nil
}

// assignment is a word that sets a variable for the command: NAME=value.
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// shellWords are the words a POSIX shell (and bash) runs itself: keywords
// and builtins, which need no program.
var shellWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`! { } case do done elif else esac fi for if in then until while function select time [[ ]]
		. : [ alias bg break builtin cd command continue declare echo eval exec exit export false fc fg getopts hash jobs kill let
		local logout newgrp printf pwd read readonly return set shift source test times trap true type typeset ulimit umask unalias unset wait`) {
		shellWords[w] = true
	}
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) suffix() string {
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return ": " + planner.OneLine(s, t.max)
}

type syncWriter struct {
	mu     sync.Mutex
	w      io.Writer
	failed error // the first write error: the output is broken
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(p)
	if err != nil && s.failed == nil {
		s.failed = err
	}
	return n, err
}

// CheckOutput says why w, where handlers write their output, cannot take
// it: a pipe or socket whose reader is gone (lanes work ... | head, once
// head has exited), a terminal that hung up, a writer that failed; nil
// when it can, or when that cannot be told.
func CheckOutput(w io.Writer) error {
	switch w := w.(type) {
	case *os.File:
		return checkFile(w)
	case *syncWriter:
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.failed != nil {
			return fmt.Errorf("lanes work's output cannot be written: %w", w.failed)
		}
	}
	return nil
}

// lockedWriter serialises writes to w. A file is left as it is: the
// command writes to it directly, with no pipe and no copying goroutine
// per message; nil stays nil (the command gets /dev/null).
func lockedWriter(w io.Writer) io.Writer {
	switch w.(type) {
	case nil, *os.File:
		return w
	}
	return &syncWriter{w: w}
}
