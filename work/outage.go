package work

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// LaneOutage is a lane whose message waits because the handler could not
// run at all (an Outage error: a missing program, a refused connection, a
// closed stdout). The message is kept (in-progress acks go on, so it is
// not redelivered and its delivery count stays) and the handler is tried
// again after a growing delay; nothing is parked or terminated because of
// it.
type LaneOutage struct {
	Lane   string    `json:"lane"`
	Since  time.Time `json:"since"`  // the first try that could not run
	Tries  int       `json:"tries"`  // tries that could not run so far
	Reason string    `json:"reason"` // the last one's error, one line
}

// Outages lists the lanes this instance serves whose message waits on a
// handler outage now, by lane name.
func (w *Worker) Outages() []LaneOutage {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []LaneOutage
	for _, s := range w.stats {
		if o := s.outage.Load(); o != nil {
			out = append(out, *o)
		}
	}
	slices.SortFunc(out, func(a, b LaneOutage) int { return strings.Compare(a.Lane, b.Lane) })
	return out
}

// outageDelay is the wait before try n+1 of a handler that could not run
// n times in a row: 500ms, doubling, at most 30s.
func outageDelay(n int) time.Duration {
	return min(500*time.Millisecond<<min(n-1, 6), 30*time.Second)
}

// untilItRuns runs the handler; while it cannot run at all (an Outage
// error), it keeps the message and tries again after a growing delay. It
// gives up when ctx ends (abort, lost contact: the error then says why)
// or the lane is handed over (the Outage error: the message goes back).
func (l *lane) untilItRuns(ctx context.Context, msg *Msg) error {
	var since time.Time
	for tries := 1; ; tries++ {
		err := l.try(ctx, msg)
		if !isOutage(err) {
			if tries > 1 {
				l.w.outageEnded(l, since, true)
				l.syncOutage()
			}
			return err
		}
		if tries == 1 {
			since = time.Now()
		}
		wait := outageDelay(tries)
		l.w.outageTry(l, LaneOutage{Lane: l.name, Since: since, Tries: tries, Reason: planner.OneLine(err.Error(), 1024)}, wait)
		if tries == 1 {
			l.syncOutage()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			err = fmt.Errorf("%w (%w)", context.Cause(ctx), err)
		case <-l.release:
		case <-l.lapsed:
		case <-l.lost:
		}
		t.Stop()
		l.w.outageEnded(l, since, false)
		l.syncOutage()
		return err
	}
}

// syncOutage brings the lane's record in line with its outage (none, or
// since when and why), in the background: inspect reports a lane whose
// handler cannot run (handler_outage).
func (l *lane) syncOutage() {
	go func() {
		l.recMu.Lock()
		defer l.recMu.Unlock()
		o := l.stats.outage.Load()
		if l.claim == nil || (o == nil) == (l.claim.Rec.Outage == nil) {
			return
		}
		var rec *membership.Outage
		if o != nil {
			rec = &membership.Outage{Since: o.Since.UTC(), Tries: o.Tries, Reason: o.Reason}
		}
		if err := l.writeRecordLocked(func(r *membership.LaneServer) { r.Outage = rec }); err != nil {
			l.w.log.Debug("cannot record the handler outage", "lane", l.name, "error", err)
		}
	}()
}

// outageTry records a try of lane l that could not run. The first lane of
// this instance to wait on an outage logs it: one line per outage, not
// per try or lane.
func (w *Worker) outageTry(l *lane, o LaneOutage, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	first := w.outageSince.IsZero()
	l.stats.outage.Store(&o)
	if first {
		w.outageSince = o.Since
		w.log.Warn("handler outage: the handler could not run; its messages wait (nothing is parked or terminated) and it is tried again after growing delays (at most 30s)",
			"lane", l.name, "error", o.Reason, "retry_in", wait.String())
		return
	}
	w.log.Debug("the handler still cannot run", "lane", l.name, "tries", o.Tries, "error", o.Reason, "retry_in", wait.String())
}

// outageEnded: lane l no longer waits on the outage, because the handler
// ran (ran) or because it gave the message up. The last lane to leave it
// logs the end.
func (w *Worker) outageEnded(l *lane, since time.Time, ran bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l.stats.outage.Store(nil)
	for _, s := range w.stats {
		if s.outage.Load() != nil {
			return
		}
	}
	took := time.Since(w.outageSince).Round(time.Millisecond).String()
	w.outageSince = time.Time{}
	if ran {
		w.log.Info("handler outage over: the handler runs again", "lane", l.name, "took", took)
		return
	}
	w.log.Info("handler outage: no message of this instance waits on it any more (handed over or stopping)", "lane", l.name, "took", took)
}
