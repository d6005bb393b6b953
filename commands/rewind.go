package commands

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/render"
)

// RewindOptions is everything lanes rewind needs.
type RewindOptions struct {
	ActionOptions
	ToSeq  uint64
	ToTime time.Time
	Drain  time.Duration
}

func rewindCommand(io *IO) *cli.Command {
	return withUsageErrors(&cli.Command{
		Name:      "rewind",
		Usage:     "set a design's lanes (all, chosen lanes, or the lanes of keys) back to a stream sequence or a time: the messages since then run again, each key's in order",
		UsageText: "lanes rewind (--stream NAME --design NAME | -f FILE) (--to-seq N | --to-time TIME) [--lanes L,...] [--key KEY]... [--drain-timeout DURATION] [--dry-run] [-o table|json] [connection flags]",
		Description: `Rewind lanes with the server's consumer reset (nats-server 2.14 or newer):
each lane delivers again from the point on, in stream order, so every key's
messages run again in their order. --to-seq is a stream sequence; --to-time
is the first message stored at or after a time ("everything since 13:55").

lanes work instances keep running. The rewind pauses its lanes, waits for
the workers to finish the messages they hold (--drain-timeout), resets the
lanes and resumes them; the workers pull again at once. A lane paused by an
operator is rewound and stays paused. A lane that delivered nothing at or
after the point is left as it is; one with messages out across the point (a
key-parallel lane) goes back to just above its ack floor, so nothing is
skipped.

Refused, with nothing changed on any lane: a point whose messages the stream
no longer has (its limits removed them: the lane, the sequences and how many
are named), a workqueue or interest stream (acknowledged messages are
deleted), a point before the lanes' partitioning began (a rewind never mixes
generations: those messages were run by the lanes of the earlier
partitioning), lanes that lanes apply holds for a repartition, and another
rewind or apply on the stream at the same time. A rewind killed midway
leaves its lanes paused (lanes inspect shows "paused by lanes rewind"): run
the same rewind again to finish it.

--dry-run shows, per lane, the ack floor and last delivery now, the ack
floor after, and how many messages run again.

Examples:
   lanes rewind -f lanes.yaml --to-time 13:55 --dry-run
   lanes rewind -f lanes.yaml --to-time 2026-12-02T13:55:00Z
   lanes rewind --stream ORDERS --design orders --to-time 15m
   lanes rewind --stream ORDERS --design orders --key alice --to-seq 1042
   lanes rewind -f lanes.yaml --lanes 3,7 --to-seq 1042 -o json`,
		Flags: actionFlags(
			&cli.Uint64Flag{Name: "to-seq", DefaultText: "none", Usage: "rewind to stream sequence `N`: it and every later message of the lanes run again"},
			&cli.StringFlag{Name: "to-time", Usage: "rewind to the first message stored at or after `TIME`: RFC 3339, a local clock time today (13:55), or a duration ago (15m)"},
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second, Usage: "wait up to `DURATION` for the workers to finish the messages they hold before the reset"},
		),
		Action: func(c *cli.Context) error {
			o, err := rewindOptions(c, io, time.Now())
			if err != nil {
				return err
			}
			return runRewind(c.Context, o)
		},
	})
}

// rewindOptions turns flags into options and validates them; now is the
// clock --to-time counts from.
func rewindOptions(c *cli.Context, io *IO, now time.Time) (RewindOptions, error) {
	ao, err := actionOptions(c, io)
	o := RewindOptions{ActionOptions: ao, ToSeq: c.Uint64("to-seq"), Drain: c.Duration("drain-timeout")}
	if err != nil {
		return o, err
	}
	switch {
	case c.IsSet("to-seq") && c.IsSet("to-time"):
		return o, usageErrorf("--to-seq and --to-time both say where to rewind to: give one")
	case !c.IsSet("to-seq") && !c.IsSet("to-time"):
		return o, usageErrorf("say where to rewind to: --to-seq N or --to-time TIME")
	case c.IsSet("to-seq") && o.ToSeq == 0:
		return o, usageErrorf("--to-seq 0: stream sequences start at 1")
	}
	if c.IsSet("to-time") {
		if o.ToTime, err = parseSince(c.String("to-time"), now); err != nil {
			return o, usageErrorf("--to-time %q: %v", c.String("to-time"), err)
		}
	}
	if o.Drain <= 0 {
		return o, usageErrorf("--drain-timeout %s: give a positive duration, e.g. 30s", o.Drain)
	}
	return o, nil
}

// parseSince reads --to-time (actions.ParseSince), and says that a
// number is a sequence, not a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	t, err := actions.ParseSince(s, now)
	if err != nil && t.IsZero() {
		if _, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
			return t, fmt.Errorf("a number is no time: for a stream sequence use --to-seq")
		}
	}
	return t, err
}

func runRewind(ctx context.Context, o RewindOptions) error {
	view := actionView[actions.RewindOutcome]{render.Rewind, render.RewindJSON, func(o *actions.RewindOutcome) bool { return o.Changed > 0 }}
	return runAction(ctx, o.ActionOptions, view, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.RewindOutcome, error) {
		return actions.Rewind(ctx, conn, sel, actions.RewindOptions{ToSeq: o.ToSeq, ToTime: o.ToTime, DryRun: o.DryRun, Drain: o.Drain})
	})
}
