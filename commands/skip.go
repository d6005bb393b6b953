package commands

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/render"
)

// SkipOptions is everything lanes skip needs.
type SkipOptions struct {
	ActionOptions
	Skip actions.SkipOptions
}

func skipCommand(io *IO) *cli.Command {
	return withUsageErrors(&cli.Command{
		Name:      "skip",
		Usage:     "settle a lane's stuck head message without running it: terminate it, or park it on the dead-letter subject",
		UsageText: "lanes skip (--stream NAME --design NAME | -f FILE) (--lanes LANE | --key KEY) --seq N [--term | --park] [--reason TEXT] [--wait DURATION] [--dry-run] [-o table|json] [connection flags]",
		Description: `Skip one message of one lane, named by its stream sequence (lanes inspect
shows a lane's head): terminate it (+TERM, the default), or park it on the
dead-letter subject the lane's lanes work instances were started with
(--dead-letter), with the Lanes-Parked-* headers naming where it came from.

lanes work instances keep running. The request goes into the membership
bucket; the instance serving the lane stops the message's handler (its
context is cancelled with a cause wrapping work.ErrSkipped), settles the
message, and never runs it again; the key's next message runs after it.
lanes skip waits for that (--wait) and prints the outcome. When no instance
serves the lane, lanes skip moves the lane's consumer past the message
itself (nats-server 2.14+), if nothing after it was delivered.

One skip per lane at a time: a lane that has moved past the message, or (on a
serial lane) a message that is not the lane's head, is refused, so that two
operators never skip two messages. The same command run again after an
interruption finishes the skip, or says it was done.

Exit codes: 0 skipped (or skipped already), 2 bad input, 3 dry run: would
skip, 4 refused (moved past, not the head, another skip under way, no
dead-letter subject), 5 recorded but not settled within --wait (run again).

Examples:
   lanes skip -f lanes.yaml --lanes 3 --seq 1234 --reason "bad payload, ticket 42"
   lanes skip --stream ORDERS --design orders --key alice --seq 1234 --park
   lanes skip -f lanes.yaml --lanes orders-n8-03 --seq 1234 --dry-run -o json`,
		Flags: actionFlags(
			&cli.Uint64Flag{Name: "seq", Usage: "the stream sequence `N` of the message to skip (the lane's head)"},
			&cli.BoolFlag{Name: "term", Usage: "terminate it (the default)"},
			&cli.BoolFlag{Name: "park", Usage: "park it on the workers' dead-letter subject instead of terminating it"},
			&cli.StringFlag{Name: "reason", Usage: "why, carried by the term or the parked copy (`TEXT`)"},
			&cli.StringFlag{Name: "by", Usage: "who skips, recorded with the request (`NAME`)", DefaultText: "user@host"},
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "how long to wait for the serving instance to settle it (`DURATION`)"},
		),
		Action: func(c *cli.Context) error {
			o, err := skipOptions(c, io)
			if err != nil {
				return err
			}
			return runSkip(c.Context, o)
		},
	})
}

// skipOptions turns flags into options and validates them.
func skipOptions(c *cli.Context, io *IO) (SkipOptions, error) {
	ao, err := actionOptions(c, io)
	o := SkipOptions{ActionOptions: ao, Skip: actions.SkipOptions{Seq: c.Uint64("seq"), Park: c.Bool("park"), DryRun: ao.DryRun,
		Reason: strings.TrimSpace(c.String("reason")), By: strings.TrimSpace(c.String("by")), Wait: c.Duration("wait")}}
	if err != nil {
		return o, err
	}
	switch {
	case !c.IsSet("seq") || o.Skip.Seq == 0:
		return o, usageErrorf("--seq: name the message to skip by its stream sequence (lanes inspect shows each lane's head)")
	case c.Bool("park") && c.Bool("term"):
		return o, usageErrorf("--park and --term both say how: give one")
	case len(o.Target.Lanes)+len(o.Target.Keys) != 1:
		return o, usageErrorf("lanes skip acts on one lane: name it with --lanes LANE, or with --key KEY")
	case o.Skip.Wait <= 0:
		return o, usageErrorf("--wait %s: give a positive duration", o.Skip.Wait)
	case len(o.Skip.Reason) > 1024:
		return o, usageErrorf("--reason is %d characters: keep it under 1024", len(o.Skip.Reason))
	}
	if o.Skip.By == "" {
		o.Skip.By = whoAmI()
	}
	return o, nil
}

func runSkip(ctx context.Context, o SkipOptions) error {
	view := actionView[actions.SkipOutcome]{render.SkipOutcome, render.SkipOutcomeJSON, func(o *actions.SkipOutcome) bool { return o.Changed }}
	return runAction(ctx, o.ActionOptions, view, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.SkipOutcome, error) {
		out, err := actions.Skip(ctx, conn, sel, o.Skip)
		if pending, ok := errors.AsType[*actions.SkipPendingError](err); ok {
			err = &incompleteError{pending} // recorded, not settled yet: run it again
		}
		return out, err
	})
}
