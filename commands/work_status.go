package commands

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/progress"
	"github.com/lanes-dev/lanes/work"
)

// workStatus is lanes work's progress on stderr: on a terminal one line,
// redrawn every second below the log (a progress.Line, which everything
// written to stderr goes through, so a log line never lands in the middle
// of it); elsewhere a log line per period.
type workStatus struct {
	*progress.Line
	tty bool
}

func newWorkStatus(w io.Writer, tty bool) *workStatus {
	return &workStatus{Line: progress.NewLine(w, tty), tty: tty}
}

// run updates the status until stop is called.
func (s *workStatus) run(w *work.Worker, log *slog.Logger, every time.Duration) (stop func()) {
	if s.tty {
		every = time.Second
	}
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastAt := w.Stats(), time.Now()
		for {
			select {
			case <-done:
				s.Clear()
				return
			case now := <-t.C:
				st := w.Stats()
				rate := float64(st.Processed-last.Processed) / now.Sub(lastAt).Seconds()
				last, lastAt = st, now
				if s.tty {
					s.Set(statusText(st, rate))
					continue
				}
				attrs := []any{"serving", st.Serving, "lanes", st.Lanes, "instances", st.Members,
					"processed", st.Processed, "per_second", fmt.Sprintf("%.1f", rate), "failed", st.Failed,
					"parked", st.Parked, "terminated", st.Terminated, "in_flight", st.InFlight, "oldest", st.Oldest.Round(time.Millisecond).String()}
				if st.Window > 0 {
					attrs = append(attrs, "window", fmt.Sprintf("%d/%d", st.Held, st.Window), "keys_running", st.KeysRunning)
					if st.OldestWaitingKey != "" {
						attrs = append(attrs, "oldest_waiting_key", st.OldestWaitingKey, "oldest_waiting", st.OldestWaiting.Round(time.Millisecond).String())
					}
					for lane, key := range st.Holders {
						attrs = append(attrs, "window_held_by", lane+":"+key)
					}
				}
				if st.Outages > 0 {
					attrs = append(attrs, "handler_outage_lanes", st.Outages, "handler_outage_for", now.Sub(st.OutageSince).Round(time.Second).String(), "handler_outage", st.OutageReason)
				}
				log.Info("status", attrs...)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func statusText(st work.Stats, rate float64) string {
	text := fmt.Sprintf("%s · serving %d of %d lanes · %d instance%s · %s done (%.0f/s) · %d failed",
		st.Instance, st.Serving, st.Lanes, st.Members, plural(st.Members), thousands(st.Processed), rate, st.Failed)
	if st.Parked > 0 {
		text += fmt.Sprintf(" · %d parked", st.Parked)
	}
	if st.InFlight > 0 {
		text += fmt.Sprintf(" · %d in flight (oldest %s)", st.InFlight, st.Oldest.Round(100*time.Millisecond))
	}
	if st.Window > 0 {
		text += fmt.Sprintf(" · window %d/%d, %d key%s running", st.Held, st.Window, st.KeysRunning, plural(st.KeysRunning))
		if st.OldestWaitingKey != "" {
			text += fmt.Sprintf(" (%s waiting %s)", planner.Printable(st.OldestWaitingKey, 40), st.OldestWaiting.Round(100*time.Millisecond))
		}
		if n := len(st.Holders); n > 0 {
			text += fmt.Sprintf(" · %d lane%s held by one key", n, plural(n))
		}
	}
	if st.Outages > 0 {
		text += fmt.Sprintf(" · handler outage for %s on %d lane%s: %s", time.Since(st.OutageSince).Round(time.Second), st.Outages, plural(st.Outages), planner.Printable(st.OutageReason, 80))
	}
	return text
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func thousands(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
