package input

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func lines(t *testing.T, src string) ([]string, error) {
	t.Helper()
	s, err := Open(context.Background(), Stdin, strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	err = s.Lines(context.Background(), func(n int, l []byte) error {
		if n != len(out)+1 {
			t.Fatalf("line %d numbered %d", len(out)+1, n)
		}
		out = append(out, string(l))
		return nil
	})
	return out, err
}

func TestLines(t *testing.T) {
	for src, want := range map[string][]string{
		"":           {},
		"a":          {"a"},
		"a\n":        {"a"},
		"a\r\nb\r\n": {"a", "b"},
		"a\n\nb":     {"a", "", "b"},
		strings.Repeat("x", chunkSize-1) + "\nyz": {strings.Repeat("x", chunkSize-1), "yz"},
		strings.Repeat("x", 3*chunkSize) + "\n":   {strings.Repeat("x", 3*chunkSize)},
	} {
		got, err := lines(t, src)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("%.20q: got %d lines %v", src, len(got), err)
		}
	}
}

// TestLineTooLong: a line over 1 MiB is refused with its number, not
// "bufio.Scanner: token too long"; exactly 1 MiB is fine.
func TestLineTooLong(t *testing.T) {
	ok := "a\n" + strings.Repeat("x", MaxLine) + "\n"
	if got, err := lines(t, ok); err != nil || len(got) != 2 {
		t.Fatalf("a line of exactly 1 MiB: %d lines, %v", len(got), err)
	}
	for _, tail := range []string{"\n", "", "\nnext\n"} {
		_, err := lines(t, "a\nb\n"+strings.Repeat("x", MaxLine+1)+tail)
		var le *LineTooLongError
		if !errors.As(err, &le) || le.Line != 3 || !strings.Contains(err.Error(), "line 3 is longer than 1 MiB") {
			t.Fatalf("want line 3 too long, got %v", err)
		}
	}
}

func TestReadAllLimit(t *testing.T) {
	s, _ := Open(context.Background(), Stdin, strings.NewReader(strings.Repeat("x", 2000)))
	if _, err := s.ReadAll(context.Background(), 1024); err == nil || !strings.Contains(err.Error(), "larger than 1 KiB") {
		t.Fatalf("want a size error, got %v", err)
	}
	s, _ = Open(context.Background(), Stdin, strings.NewReader("abc"))
	if b, err := s.ReadAll(context.Background(), 1024); err != nil || string(b) != "abc" {
		t.Fatalf("%q %v", b, err)
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "nope"), nil)
	if err == nil || !strings.Contains(err.Error(), "no such file") || strings.Contains(err.Error(), "open ") {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := Open(context.Background(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory: %v", err)
	}
}

// TestCancelBlockedRead: a pipe that never sends does not hold Lines once
// the context ends.
func TestCancelBlockedRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, _ := Open(context.Background(), Stdin, r)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.Lines(ctx, func(_ int, l []byte) error { got <- string(l); return nil })
	}()
	// A trickling pipe: each line is handled as it arrives, not after a
	// buffer fills.
	for _, l := range []string{"one", "two"} {
		w.WriteString(l + "\n")
		select {
		case g := <-got:
			if g != l {
				t.Fatalf("got %q want %q", g, l)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("line %q not handled while the pipe stays open", l)
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Lines still blocked a second after cancellation")
	}
}

// TestCancelFIFOOpen: opening a FIFO nobody writes to gives up on
// cancellation, and the goroutine blocked in open(2) is released.
func TestCancelFIFOOpen(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "keys")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Open(ctx, fifo, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Open: %v after %s", err, time.Since(start))
	}
	// The abandoned open was woken: a writer now finds no reader.
	deadline := time.Now().Add(5 * time.Second)
	for {
		w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			break // ENXIO: no reader left
		}
		w.Close()
		if time.Now().After(deadline) {
			t.Fatal("the FIFO still has a reader: the open goroutine was not released")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFIFO: a FIFO is read like a file once a writer comes.
func TestFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "keys")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		io.WriteString(w, "alice\nbob\n")
		w.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, fifo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	if err := s.Lines(ctx, func(_ int, l []byte) error { got = append(got, string(l)); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "alice,bob" || s.Name() != "keys" {
		t.Fatalf("%v from %s", got, s.Name())
	}
}

// TestSpoolLeavesNoName: the spool never appears in the temporary
// directory, so a killed process leaves nothing behind.
func TestSpoolLeavesNoName(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	s, err := NewSpool()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("the spool is visible in the temporary directory: %v", entries)
	}
	if _, err := s.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(s)
	if string(b) != "hello" {
		t.Fatalf("read back %q", b)
	}
	s.Close()
}
