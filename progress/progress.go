// Package progress shows how far a long command is, on stderr. On a
// terminal a Meter draws a bar per step on the bottom Line, redrawn in
// place; without one (a CI log, a pipe) it prints a plain line when a step
// starts, every few seconds while it runs, and when it ends, so a log
// shows what is happening and how much is left. A Line alone is a status
// that stays below what else the command writes (lanes work).
//
// apply (its steps: lanes, a repartition's drain, resume, delete),
// simulate --live (a step per strategy) and work use it.
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// DefaultEvery is how often a plain line repeats while a step runs.
const DefaultEvery = 5 * time.Second

// redraw is the least time between two drawings of a bar.
const redraw = 100 * time.Millisecond

// barWidth is the bar's length in cells.
const barWidth = 30

// Meter reports progress through named steps, each with a count done out
// of a total. It is safe for concurrent use.
type Meter struct {
	label string
	line  *Line     // a terminal; nil draws plain lines on w
	w     io.Writer // plain lines
	every time.Duration
	now   func() time.Time
	noETA map[string]bool

	mu      sync.Mutex
	step    string
	done    int64
	total   int64
	started time.Time
	drawn   time.Time // last bar or line
	printed string    // the last plain line's figures
}

// New is a meter writing to w: bars when w is a terminal, plain lines
// naming label (e.g. "apply") otherwise.
func New(w io.Writer, terminal bool, label string) *Meter {
	m := &Meter{label: label, w: w, every: DefaultEvery, now: time.Now, noETA: map[string]bool{}}
	if terminal {
		m.line = NewLine(w, true)
	}
	return m
}

// NoETA marks a step whose pace says nothing about its end (a drain that
// waits for workers): its bar shows no time estimate.
func (m *Meter) NoETA(step string) *Meter {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.noETA[step] = true
	return m
}

// Update says where a step is. A new step name ends the one before.
func (m *Meter) Update(step string, done, total int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if step != m.step || m.started.IsZero() {
		m.end()
		m.step, m.started, m.printed = step, now, ""
		m.done, m.total = done, total
		m.draw(now, true)
		return
	}
	m.done, m.total = done, total
	m.draw(now, false)
}

// Finish ends the current step, if any: its last figures are shown.
func (m *Meter) Finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.end()
	m.step, m.started = "", time.Time{}
}

func (m *Meter) draw(now time.Time, force bool) {
	if m.line != nil {
		if force || now.Sub(m.drawn) >= redraw || m.done >= m.total {
			m.line.Set(m.bar(now))
			m.drawn = now
		}
		return
	}
	if force || now.Sub(m.drawn) >= m.every {
		m.print(now)
	}
}

// end shows a step's last figures and leaves them: the bar stays on its
// line, or a plain line is printed unless it would repeat the last one.
func (m *Meter) end() {
	if m.started.IsZero() {
		return
	}
	now := m.now()
	if m.line != nil {
		m.line.Set(m.bar(now))
		m.line.Keep()
		return
	}
	if m.figures() != m.printed {
		m.print(now)
	}
}

func (m *Meter) print(now time.Time) {
	m.printed, m.drawn = m.figures(), now
	fmt.Fprintf(m.w, "%s: %s, %s\n", m.label, m.printed, elapsed(now.Sub(m.started)))
}

// figures is the step and its count: "lanes 512/1024 (50%)".
func (m *Meter) figures() string {
	return fmt.Sprintf("%s %d/%d (%d%%)", m.step, m.done, m.total, percent(m.done, m.total))
}

// bar draws the step as a terminal bar:
// "lanes  50% |███████████████               | (512/1024) [1s:1s]".
func (m *Meter) bar(now time.Time) string {
	p := percent(m.done, m.total)
	full := barWidth * p / 100
	took := now.Sub(m.started)
	times := elapsed(took)
	if !m.noETA[m.step] {
		left := "?"
		if m.done > 0 && m.total >= m.done {
			left = elapsed(time.Duration(float64(took) * float64(m.total-m.done) / float64(m.done)))
		}
		times += ":" + left
	}
	return fmt.Sprintf("%s %3d%% |%s%s| (%d/%d) [%s]", m.step, p, strings.Repeat("█", full), strings.Repeat(" ", barWidth-full), m.done, m.total, times)
}

func percent(done, total int64) int {
	if total <= 0 {
		return 100
	}
	return int(min(max(done, 0)*100/total, 100))
}

func elapsed(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Line is a terminal's bottom line: a status redrawn in place, which stays
// below what else is written through the Line (or a writer it wraps).
// Without a terminal it draws nothing and writes pass through.
type Line struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	text string
}

// NewLine is the bottom line of w, a terminal or not.
func NewLine(w io.Writer, terminal bool) *Line { return &Line{w: w, tty: terminal} }

const clearLine = "\r\033[K"

// Write writes p above the status.
func (l *Line) Write(p []byte) (int, error) { return l.writeTo(l.w, p) }

// Wrap routes another writer to the same terminal (a handler's stdout)
// through the line, so the status never lands in the middle of its output.
func (l *Line) Wrap(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) { return l.writeTo(w, p) })
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (l *Line) writeTo(w io.Writer, p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.text != "" {
		io.WriteString(l.w, clearLine)
	}
	n, err := w.Write(p)
	if l.tty && l.text != "" {
		io.WriteString(l.w, l.text)
	}
	return n, err
}

// Set shows text as the status.
func (l *Line) Set(text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.tty {
		return
	}
	l.text = text
	io.WriteString(l.w, clearLine+text)
}

// Keep leaves the status where it is, as a line of its own; the next
// status starts below it.
func (l *Line) Keep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.text != "" {
		io.WriteString(l.w, "\n")
		l.text = ""
	}
}

// Clear removes the status.
func (l *Line) Clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tty && l.text != "" {
		io.WriteString(l.w, clearLine)
		l.text = ""
	}
}
