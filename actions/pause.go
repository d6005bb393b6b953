package actions

import (
	"context"
	"fmt"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
)

// Forever is how long a pause without an end lasts: the server's pause
// needs a time, and a century reads as "until resumed" (inspect shows it
// so).
const Forever = 100 * 365 * 24 * time.Hour

// PauseOptions say how to pause.
type PauseOptions struct {
	Until  time.Time // zero: until resumed
	By     string    // who pauses, for inspect (user@host by default in the CLI)
	Reason string
	DryRun bool
}

// LaneChange is what an action did (or, in a dry run, would do) to one
// lane: its state before and after, in words, and whether it changed.
type LaneChange struct {
	Lane    string `json:"lane"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Changed bool   `json:"changed"`
}

// Outcome is an action's result on its lanes.
type Outcome struct {
	Action  string       `json:"action"`
	Stream  string       `json:"stream"`
	Design  string       `json:"design"`
	DryRun  bool         `json:"dry_run"`
	Lanes   []LaneChange `json:"lanes"`
	Changed int          `json:"changed"` // lanes changed (or that would be)
}

func (o *Outcome) add(c LaneChange) {
	o.Lanes = append(o.Lanes, c)
	if c.Changed {
		o.Changed++
	}
}

// Pause pauses the selected lanes with the server's pause API: a paused
// lane delivers nothing; a worker finishes the message it holds and
// waits. Who paused, when and why go into the membership bucket, for
// inspect. Lanes that lanes apply holds for a repartition are refused
// before anything changes: apply resumes them when their turn comes, and
// would drop an operator's pause. A lane already paused until the same
// time is left as it is, so a re-run (after an interrupted one) pauses
// only what is left.
func Pause(ctx context.Context, c *connect.Conn, sel *Selection, o PauseOptions) (*Outcome, error) {
	until := o.Until
	if until.IsZero() {
		until = sel.Report.Time.Add(Forever)
	}
	if !until.After(sel.Report.Time) {
		return nil, inputErrorf("--until %s is not in the future", o.Until.Format(time.RFC3339))
	}
	for _, l := range sel.Lanes {
		if l.Held != "" {
			return nil, refusedf("lane %s is held by lanes apply for a %s: apply resumes it once the old lanes drained, which would end a pause; pause it after the repartition, or leave it out (--lanes)", l.Name, l.Held)
		}
	}
	out := &Outcome{Action: "pause", Stream: sel.Report.Stream, Design: sel.Lanes[0].Design, DryRun: o.DryRun}
	api := jsapi.New(c)
	replicas := max(sel.Report.Replicas, 1) // as lanes work makes the bucket
	for _, l := range sel.Lanes {
		after := pausedText(until, sel.Report.Time)
		change := LaneChange{Lane: l.Name, Before: laneState(l), After: after}
		change.Changed = !samePause(l, until, sel.Report.Time)
		if change.Changed && !o.DryRun {
			// The record first: a pause without one shows no name in
			// inspect, a record without a pause is not shown at all.
			p := membership.Pause{By: o.By, At: time.Now().UTC(), Reason: o.Reason}
			if !o.Until.IsZero() {
				p.Until = o.Until.UTC()
			}
			if err := membership.RecordPause(ctx, c.JS, sel.Report.Stream, l.Design, l.Name, p, replicas); err != nil {
				return out, err
			}
			if err := api.PauseConsumer(ctx, sel.Report.Stream, l.Name, until); err != nil {
				return out, fmt.Errorf("pausing lane %s: %w", l.Name, err)
			}
		}
		out.add(change)
	}
	return out, nil
}

// Resume resumes the selected paused lanes; workers pull again at once
// (they follow the server's pause advisories). Lanes held by lanes apply
// for a repartition are refused before anything changes: resuming one
// before the old lanes drained would break per-key order. A lane not
// paused is left as it is.
func Resume(ctx context.Context, c *connect.Conn, sel *Selection, dryRun bool) (*Outcome, error) {
	for _, l := range sel.Lanes {
		if l.Held != "" && l.Paused {
			return nil, refusedf("lane %s is held by lanes apply for a %s: resuming it before the old lanes drained would run a key's new messages before its old ones; re-run lanes apply, which resumes it in turn", l.Name, l.Held)
		}
	}
	out := &Outcome{Action: "resume", Stream: sel.Report.Stream, Design: sel.Lanes[0].Design, DryRun: dryRun}
	api := jsapi.New(c)
	for _, l := range sel.Lanes {
		change := LaneChange{Lane: l.Name, Before: laneState(l), After: "running", Changed: l.Paused}
		if change.Changed && !dryRun {
			if err := api.PauseConsumer(ctx, sel.Report.Stream, l.Name, time.Time{}); err != nil {
				return out, fmt.Errorf("resuming lane %s: %w", l.Name, err)
			}
		}
		if !dryRun && (change.Changed || l.PausedBy != nil) {
			if err := membership.ForgetPause(ctx, c.JS, sel.Report.Stream, l.Design, l.Name); err != nil {
				return out, err
			}
		}
		out.add(change)
	}
	return out, nil
}

// samePause: the lane is paused until that time already (within two
// seconds: the server counts the time left from its own clock), or until
// resumed and that is what is asked.
func samePause(l *health.Lane, until, now time.Time) bool {
	if !l.Paused {
		return false
	}
	if until.Sub(now) > Forever/2 && l.PauseRemaining > Forever/2 {
		return true // until resumed, both
	}
	end := now.Add(l.PauseRemaining)
	d := end.Sub(until)
	return d > -2*time.Second && d < 2*time.Second
}

// laneState is a lane's state in words, for a change's before.
func laneState(l *health.Lane) string {
	switch {
	case l.Held != "" && l.Paused:
		return "held for a " + l.Held
	case l.Paused:
		s := "paused for another " + l.PauseRemaining.Round(time.Second).String()
		if l.PauseRemaining > Forever/2 {
			s = "paused until resumed"
		}
		if p := l.PausedBy; p != nil {
			s += " by " + p.By
		}
		return s
	}
	return "running"
}

// pausedText is "paused until <time>", or "paused until resumed".
func pausedText(until, now time.Time) string {
	if until.Sub(now) > Forever/2 {
		return "paused until resumed"
	}
	return "paused until " + until.UTC().Format(time.RFC3339)
}
