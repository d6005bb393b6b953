package progress

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/testutil"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func plainMeter(c *clock) (*Meter, *strings.Builder) {
	var b strings.Builder
	m := New(&b, false, "apply")
	m.now = c.now
	return m, &b
}

// TestPlainLines: without a terminal, a line when a step starts, one every
// few seconds while it runs (however often it is updated), the last
// figures when it ends, and never the same figures twice in a row.
func TestPlainLines(t *testing.T) {
	c := newClock()
	m, out := plainMeter(c)
	m.Update("lanes", 0, 1024)
	for i := int64(1); i <= 100; i++ { // 100 updates within 1s: no line
		c.advance(10 * time.Millisecond)
		m.Update("lanes", i, 1024)
	}
	c.advance(4 * time.Second) // 5s after the start
	m.Update("lanes", 512, 1024)
	c.advance(time.Second)
	m.Update("lanes", 1024, 1024)
	m.Update("drain", 0, 40) // a new step: the old one's end, then the new one
	c.advance(12 * time.Second)
	m.Update("drain", 40, 40)
	m.Finish()
	m.Finish() // nothing more
	want := []string{
		"apply: lanes 0/1024 (0%), 0s",
		"apply: lanes 512/1024 (50%), 5s",
		"apply: lanes 1024/1024 (100%), 6s",
		"apply: drain 0/40 (0%), 0s",
		"apply: drain 40/40 (100%), 12s",
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	// A step whose last figures were just printed ends without a repeat.
	out.Reset()
	m.Update("delete", 3, 3)
	m.Finish()
	if got := out.String(); got != "apply: delete 3/3 (100%), 0s\n" {
		t.Fatalf("ended step repeated: %q", got)
	}
}

// TestBars: on a terminal, one bar redrawn in place per step, left on its
// own line when the step ends; a step with no estimate shows none.
func TestBars(t *testing.T) {
	c := newClock()
	var out strings.Builder
	m := New(&out, true, "apply").NoETA("drain")
	m.now = c.now
	m.Update("lanes", 0, 10)
	c.advance(time.Second)
	m.Update("lanes", 5, 10)
	c.advance(10 * time.Millisecond)
	m.Update("lanes", 6, 10) // within the redraw period: not drawn
	c.advance(time.Second)
	m.Update("drain", 1, 4)
	m.Finish()
	s := out.String()
	for _, want := range []string{
		clearLine + "lanes   0% |" + strings.Repeat(" ", 30) + "| (0/10) [0s:?]",
		clearLine + "lanes  50% |" + strings.Repeat("█", 15) + strings.Repeat(" ", 15) + "| (5/10) [1s:1s]",
		"lanes  60% |" + strings.Repeat("█", 18) + strings.Repeat(" ", 12) + "| (6/10) [2s:1.3s]\n", // its end, kept
		"drain  25% |" + strings.Repeat("█", 7) + strings.Repeat(" ", 23) + "| (1/4) [0s]\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in %q", want, s)
		}
	}
	if strings.Count(s, "(6/10)") != 1 {
		t.Errorf("a bar within the redraw period was drawn: %q", s)
	}
	if strings.Contains(s, "apply:") {
		t.Errorf("plain lines on a terminal: %q", s)
	}
}

// TestLine: what is written goes above the status, which is redrawn below
// it; without a terminal the status is never drawn.
func TestLine(t *testing.T) {
	var out, other strings.Builder
	l := NewLine(&out, true)
	l.Set("serving 3 lanes")
	l.Write([]byte("log line\n"))
	l.Wrap(&other).Write([]byte("handler output\n"))
	l.Clear()
	l.Write([]byte("after\n"))
	want := clearLine + "serving 3 lanes" + clearLine + "log line\n" + "serving 3 lanes" + clearLine + "serving 3 lanes" + clearLine + "after\n"
	if out.String() != want || other.String() != "handler output\n" {
		t.Fatalf("terminal: %q\nother: %q", out.String(), other.String())
	}
	var plain strings.Builder
	p := NewLine(&plain, false)
	p.Set("status")
	p.Write([]byte("log\n"))
	p.Keep()
	p.Clear()
	if plain.String() != "log\n" {
		t.Fatalf("no terminal: %q", plain.String())
	}
}

// TestConcurrentUpdates: apply reports from many requests at once.
func TestConcurrentUpdates(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var out testutil.Buffer
		m := New(&out, tty, "apply")
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					m.Update("lanes", int64(g*100+i), 800)
				}
			}()
		}
		wg.Wait()
		m.Finish()
		if !strings.Contains(out.String(), "lanes") {
			t.Fatalf("tty %v: nothing shown", tty)
		}
	}
}
