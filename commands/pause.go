package commands

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/render"
)

// PauseOptions is everything lanes pause needs.
type PauseOptions struct {
	ActionOptions
	Until  time.Time
	By     string
	Reason string
}

func pauseCommand(io *IO) *cli.Command {
	return withUsageErrors(&cli.Command{
		Name:      "pause",
		Usage:     "pause a design's lanes (all, chosen lanes, or the lanes of keys), optionally until a time",
		UsageText: "lanes pause (--stream NAME --design NAME | -f FILE) [--lanes L,...] [--key KEY]... [--until TIME | --for DURATION] [--reason TEXT] [--dry-run] [-o table|json] [connection flags]",
		Description: `Pause lanes with the server's pause API: a paused lane delivers nothing.
lanes work instances keep running: each finishes the message it holds, then
waits, and pulls again the moment the lane is resumed (by lanes resume, or
when --until comes). Nothing is lost and no position moves.

Without --until or --for the pause lasts until lanes resume. Who paused
(--by, default user@host), when and why (--reason) are recorded in the
membership bucket; lanes inspect shows them beside the pause.

A lane that lanes apply holds for a repartition is refused: apply resumes it
when the old lanes have drained. A lane already paused until the same time is
left as it is, so a re-run finishes an interrupted one.

Examples:
   lanes pause -f lanes.yaml --reason "bad deploy at 14:00"
   lanes pause --stream ORDERS --design orders --lanes 3,7 --for 30m
   lanes pause --stream ORDERS --design orders --key alice --until 15:30
   lanes pause -f lanes.yaml --dry-run -o json`,
		Flags: actionFlags(
			&cli.StringFlag{Name: "until", Usage: "pause until `TIME` (RFC 3339, or 15:30 for the next 15:30 local time)"},
			&cli.DurationFlag{Name: "for", Usage: "pause for `DURATION` (e.g. 30m)"},
			&cli.StringFlag{Name: "reason", Usage: "why, shown by lanes inspect (`TEXT`)"},
			&cli.StringFlag{Name: "by", Usage: "who pauses, shown by lanes inspect (`NAME`)", DefaultText: "user@host"},
		),
		Action: func(c *cli.Context) error {
			o, err := pauseOptions(c, io, time.Now())
			if err != nil {
				return err
			}
			return runPause(c.Context, o)
		},
	})
}

func resumeCommand(io *IO) *cli.Command {
	return withUsageErrors(&cli.Command{
		Name:      "resume",
		Usage:     "resume a design's paused lanes (all, chosen lanes, or the lanes of keys)",
		UsageText: "lanes resume (--stream NAME --design NAME | -f FILE) [--lanes L,...] [--key KEY]... [--dry-run] [-o table|json] [connection flags]",
		Description: `Resume paused lanes: lanes work instances pull again at once, and each key's
waiting messages run in order. Lanes not paused are left as they are.

A lane that lanes apply holds for a repartition is refused: resuming it
before the old lanes have drained would run a key's new messages before its
old ones. Re-run lanes apply, which resumes it in turn.

Examples:
   lanes resume -f lanes.yaml
   lanes resume --stream ORDERS --design orders --lanes 3,7
   lanes resume -f lanes.yaml --dry-run`,
		Flags: actionFlags(),
		Action: func(c *cli.Context) error {
			o, err := actionOptions(c, io)
			if err != nil {
				return err
			}
			return runAction(c.Context, o, laneChangesView, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.Outcome, error) {
				return actions.Resume(ctx, conn, sel, o.DryRun)
			})
		},
	})
}

// pauseOptions turns flags into options and validates them; now is the
// clock --until and --for count from.
func pauseOptions(c *cli.Context, io *IO, now time.Time) (PauseOptions, error) {
	ao, err := actionOptions(c, io)
	o := PauseOptions{ActionOptions: ao, Reason: strings.TrimSpace(c.String("reason")), By: strings.TrimSpace(c.String("by"))}
	if err != nil {
		return o, err
	}
	if c.IsSet("until") && c.IsSet("for") {
		return o, usageErrorf("--until and --for both say how long: give one")
	}
	if c.IsSet("for") {
		if c.Duration("for") <= 0 {
			return o, usageErrorf("--for %s: give a positive duration, e.g. 30m", c.Duration("for"))
		}
		o.Until = now.Add(c.Duration("for"))
	}
	if c.IsSet("until") {
		if o.Until, err = parseUntil(c.String("until"), now); err != nil {
			return o, usageErrorf("--until %q: %v", c.String("until"), err)
		}
	}
	if o.By == "" {
		o.By = whoAmI()
	}
	if len(o.Reason) > 1024 {
		return o, usageErrorf("--reason is %d characters: keep it under 1024", len(o.Reason))
	}
	return o, nil
}

// parseUntil reads an RFC 3339 time, or a clock time (15:30, 15:30:05) as
// its next occurrence in local time; it must be in the future.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if !t.After(now) {
			return t, fmt.Errorf("%s is not in the future", t.Format(time.RFC3339))
		}
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if c, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			t := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), 0, now.Location())
			if !t.After(now) {
				t = t.AddDate(0, 0, 1)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a time: write 2026-12-02T15:30:00Z (RFC 3339) or 15:30 (local)")
}

// whoAmI is user@host, for the pause record.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}

func runPause(ctx context.Context, o PauseOptions) error {
	return runAction(ctx, o.ActionOptions, laneChangesView, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.Outcome, error) {
		return actions.Pause(ctx, conn, sel, actions.PauseOptions{Until: o.Until, By: o.By, Reason: o.Reason, DryRun: o.DryRun})
	})
}

// actionView shows an action's outcome (a table or JSON) and says
// whether it changed something (or, in a dry run, would: exit 3).
type actionView[T any] struct {
	table   func(io.Writer, render.Styles, *T) error
	json    func(io.Writer, *T) error
	changes func(*T) bool
}

var laneChangesView = actionView[actions.Outcome]{render.Outcome, render.OutcomeJSON, func(o *actions.Outcome) bool { return o.Changed > 0 }}

// runAction connects, selects the target's lanes, runs the action and
// shows its outcome (also what it did before an error stopped it). A
// dry run that would change something exits 3.
func runAction[T any](ctx context.Context, o ActionOptions, v actionView[T], act func(context.Context, *connect.Conn, *actions.Selection) (*T, error)) error {
	conn, err := connect.Dial(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	sel, err := actions.Select(ctx, conn, o.Target)
	if err != nil {
		return err
	}
	out, err := act(ctx, conn, sel)
	if out != nil {
		var rerr error
		if o.Output == "json" {
			rerr = v.json(o.IO.Out, out)
		} else {
			rerr = v.table(o.IO.Out, render.NewStyles(o.IO.Out), out)
		}
		if err == nil {
			err = rerr
		}
	}
	if err == nil && o.DryRun && v.changes(out) {
		return &pendingError{}
	}
	return err
}
