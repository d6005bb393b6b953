package commands

import (
	"context"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/render"
)

// ParkedOptions is everything lanes parked's subcommands need.
type ParkedOptions struct {
	ActionOptions
	Filter     actions.ParkedFilter
	OutOfOrder bool
}

const parkedSelection = `Parked messages are those lanes work put on a dead-letter subject
(--on-poison park --dead-letter SUBJECT), with Lanes-Parked-* headers naming
where each came from and why. The dead-letter subjects are those the design's
instances record in the membership bucket, or --dead-letter SUBJECT. Each is
named by SEQ, its own sequence in the stream that stores the dead-letter
subject (lanes parked list shows it; ORIGIN is the sequence it had in the
design's stream).

Choose them with --lanes and --key (the lanes' and keys' parked messages),
--seq, --reason (a part of it: terminated, failed) and --older-than.`

func parkedCommand(io *IO) *cli.Command {
	sub := func(cmd *cli.Command) *cli.Command {
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return usageError(err, cmd.Flags, "lanes parked "+cmd.Name+" --help")
		}
		return cmd
	}
	filterFlags := []cli.Flag{
		&cli.StringFlag{Name: "dead-letter", Usage: "the dead-letter `SUBJECT` (default: those the design's lanes work instances record)"},
		&cli.StringFlag{Name: "reason", Usage: "only messages whose reason contains `TEXT` (terminated, failed)"},
		&cli.DurationFlag{Name: "older-than", Usage: "only messages parked longer than `DURATION` ago"},
		&cli.StringSliceFlag{Name: "seq", Usage: "only the parked messages with these `SEQ`s (as lanes parked list shows them), comma-separated or repeated"},
	}
	all := &cli.BoolFlag{Name: "all", Usage: "every parked message of the design that the other flags choose (needed when none narrows the choice)"}
	return withUsageErrors(&cli.Command{
		Name:  "parked",
		Usage: "list, show, discard or replay a design's parked messages (lanes work --on-poison park)",
		Description: parkedSelection + `

Examples:
   lanes parked list -f lanes.yaml
   lanes parked show -f lanes.yaml --seq 42
   lanes parked replay -f lanes.yaml --key alice --dry-run
   lanes parked discard -f lanes.yaml --reason terminated --older-than 168h`,
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.ShowSubcommandHelp(c)
			}
			return usageErrorf("unknown command %q of lanes parked: list, show, discard or replay; see lanes parked --help", c.Args().First())
		},
		Subcommands: []*cli.Command{
			sub(&cli.Command{
				Name:      "list",
				Usage:     "list a design's parked messages, with their lane, key, reason, attempts and age, and counts",
				UsageText: "lanes parked list (--stream NAME --design NAME | -f FILE) [--lanes L,...] [--key KEY]... [--seq SEQ,...] [--reason TEXT] [--older-than DURATION] [--dead-letter SUBJECT] [-o table|json] [connection flags]",
				Description: parkedSelection + `

Exit 0 whatever is parked (inspect --fail-on says when too much is); 2 when
no dead-letter subject is known or the design does not exist.

Examples:
   lanes parked list -f lanes.yaml
   lanes parked list --stream ORDERS --design orders --key alice -o json
   lanes parked list -f lanes.yaml --reason terminated --dead-letter dlq.orders`,
				Flags: actionFlags(filterFlags...),
				Action: func(c *cli.Context) error {
					o, err := parkedOptions(c, io)
					if err != nil {
						return err
					}
					return runParkedList(c.Context, o)
				},
			}),
			sub(&cli.Command{
				Name:      "show",
				Usage:     "show one parked message: where it came from, why it was parked, its headers and payload",
				UsageText: "lanes parked show (--stream NAME --design NAME | -f FILE) --seq SEQ [--dead-letter SUBJECT] [-o table|json] [connection flags]",
				Description: `Show one parked message, named by its SEQ (its own sequence in the stream
that stores the dead-letter subject, as lanes parked list shows it): its
origin, lane, key, reason, last error, headers and payload. Text is escaped
(control characters, invalid UTF-8) and the payload is cut after 4 KiB; in
JSON the payload is text when it is UTF-8, else base64.

Examples:
   lanes parked show -f lanes.yaml --seq 42
   lanes parked show --stream ORDERS --design orders --seq 42 -o json`,
				Flags: actionFlags(filterFlags...),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usageErrorf("lanes parked show takes the message's sequence as --seq %s (and flags before any argument)", c.Args().First())
					}
					o, err := parkedOptions(c, io)
					if err != nil {
						return err
					}
					if len(o.Filter.Seqs) != 1 {
						return usageErrorf("--seq: name one parked message (lanes parked list shows their SEQ)")
					}
					return runParkedShow(c.Context, o)
				},
			}),
			sub(&cli.Command{
				Name:      "discard",
				Usage:     "delete parked messages from their dead-letter stream",
				UsageText: "lanes parked discard (--stream NAME --design NAME | -f FILE) (--seq SEQ,... | --lanes L,... | --key KEY | --reason TEXT | --older-than DURATION | --all) [--dry-run] [-o table|json] [connection flags]",
				Description: parkedSelection + `

Discard deletes the chosen messages from the stream that stores the
dead-letter subject: they are gone. --dry-run lists what would go (exit 3
when something would). A message already gone (another operator, an earlier
run) is said so, so a re-run finishes an interrupted discard.

Examples:
   lanes parked discard -f lanes.yaml --seq 42,43 --dry-run
   lanes parked discard -f lanes.yaml --key alice
   lanes parked discard -f lanes.yaml --all --older-than 720h`,
				Flags: actionFlags(append(filterFlags, all)...),
				Action: func(c *cli.Context) error {
					o, err := parkedOptions(c, io)
					if err != nil {
						return err
					}
					return runParkedAction(c.Context, o, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.ParkedOutcome, error) {
						return actions.DiscardParked(ctx, conn, sel, o.Filter, o.DryRun)
					})
				},
			}),
			sub(&cli.Command{
				Name:      "replay",
				Usage:     "publish parked messages again to be processed, key by key in their order, then delete them",
				UsageText: "lanes parked replay (--stream NAME --design NAME | -f FILE) (--seq SEQ,... | --lanes L,... | --key KEY | --reason TEXT | --older-than DURATION | --all) [--out-of-order] [--dry-run] [-o table|json] [connection flags]",
				Description: parkedSelection + `

Replay publishes each chosen message again to its design's subject (as it was
published: the stream's mapping puts it on its key's lane of the current
partitioning), key by key in the order the messages first had, and deletes
the parked message only once the stream has acknowledged the copy. lanes
work instances keep running and process the copies in order.

The copy keeps the payload and headers (Lanes-Parked-* say where and why it
was parked) and gets Lanes-Replayed-From-Stream and Lanes-Replayed-From-Seq:
the sequence the message first had. The copy gets a new, higher stream
sequence: a version-checked handler must use Lanes-Replayed-From-Seq as the
message's version, or the copy wins over the key's newer updates
(docs/effects.md).

A key that has moved on is refused (exit 4), naming it: the stream holds a
message of the key published after its parked ones (processed, or waiting),
which runs before the copies; an earlier parked message of the key is left
out; or the stream's retention (workqueue, interest, or limits that removed
them) keeps lanes from telling. --out-of-order replays them anyway. A
message published for the key while the replay runs also runs before the
copies.

A quarantined key (lanes work --on-poison quarantine; inspect lists it) that
the choice covers (--key KEY, one of its parked messages, or --all) is
replayed whole and then lifted: every message the quarantine parked goes back
in the order it first had, in rounds, and a message that arrives for the key
during the replay is parked and replayed in a later round, so it runs after
every replayed one; then the quarantine is lifted and the key's new messages
run in order. A replayed message that fails again leaves the key quarantined
(exit 4). The record in the membership bucket says how far a replay got: a
replay killed midway is finished by running it again. A message parked just
as the quarantine was lifted is reported (exit 4, with the --out-of-order
--seq to replay it).

Each copy has the message ID lanes-replay:<stream>:<origin seq>: a replay
killed between a copy and its delete, or run by two operators at once,
publishes each message once when it is run again (the copy is found in the
stream, or dropped as a duplicate within the stream's duplicate window).

Examples:
   lanes parked replay -f lanes.yaml --key alice --dry-run
   lanes parked replay -f lanes.yaml --key alice       # a quarantined key: replayed, then lifted
   lanes parked replay -f lanes.yaml --reason failed --all
   lanes parked replay -f lanes.yaml --seq 42 --out-of-order`,
				Flags: actionFlags(append(filterFlags, all,
					&cli.BoolFlag{Name: "out-of-order", Usage: "replay keys that have moved on too: their copies run after the key's later messages"})...),
				Action: func(c *cli.Context) error {
					o, err := parkedOptions(c, io)
					if err != nil {
						return err
					}
					return runParkedAction(c.Context, o, func(ctx context.Context, conn *connect.Conn, sel *actions.Selection) (*actions.ParkedOutcome, error) {
						return actions.ReplayParked(ctx, conn, sel, o.Filter, actions.ReplayOptions{DryRun: o.DryRun, OutOfOrder: o.OutOfOrder})
					})
				},
			}),
		},
	})
}

// parkedOptions turns flags into options and validates them.
func parkedOptions(c *cli.Context, io *IO) (ParkedOptions, error) {
	ao, err := actionOptions(c, io)
	o := ParkedOptions{ActionOptions: ao, OutOfOrder: c.Bool("out-of-order")}
	if err != nil {
		return o, err
	}
	if err := notEmpty(c, "dead-letter", "reason"); err != nil {
		return o, err
	}
	f := actions.ParkedFilter{DeadLetter: strings.TrimSpace(c.String("dead-letter")), Reason: strings.TrimSpace(c.String("reason")),
		OlderThan: c.Duration("older-than"), All: c.Bool("all"), Lanes: o.Target.Lanes, Keys: o.Target.Keys}
	if f.DeadLetter != "" && strings.ContainsAny(f.DeadLetter, "*> \t\r\n") {
		return o, usageErrorf("--dead-letter %q: a literal subject, as lanes work --dead-letter takes it (no wildcards or spaces)", f.DeadLetter)
	}
	if c.IsSet("older-than") && f.OlderThan <= 0 {
		return o, usageErrorf("--older-than %s: give a positive duration, e.g. 24h", f.OlderThan)
	}
	for _, v := range c.StringSlice("seq") {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil || n == 0 {
				return o, usageErrorf("--seq %q: a parked message's sequence, a whole number from 1 (lanes parked list shows them)", s)
			}
			f.Seqs = append(f.Seqs, n)
		}
	}
	o.Filter = f
	return o, nil
}

// parkedSelect connects and selects the design's lanes (Select refuses a
// design without lanes and unknown lanes or keys).
func parkedSelect(ctx context.Context, o ParkedOptions) (*connect.Conn, *actions.Selection, error) {
	conn, err := connect.Dial(ctx, o.Conn)
	if err != nil {
		return nil, nil, err
	}
	sel, err := actions.Select(ctx, conn, o.Target)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sel, nil
}

func runParkedList(ctx context.Context, o ParkedOptions) error {
	conn, sel, err := parkedSelect(ctx, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	p, err := actions.ReadParked(ctx, conn, sel, o.Filter)
	if err != nil {
		return err
	}
	if o.Output == "json" {
		return render.ParkedListJSON(o.IO.Out, p)
	}
	return render.ParkedList(o.IO.Out, render.NewStyles(o.IO.Out), p)
}

func runParkedShow(ctx context.Context, o ParkedOptions) error {
	conn, sel, err := parkedSelect(ctx, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	m, err := actions.ShowParked(ctx, conn, sel, o.Filter, o.Filter.Seqs[0])
	if err != nil {
		return err
	}
	if o.Output == "json" {
		return render.ParkedMsgJSON(o.IO.Out, m)
	}
	return render.ParkedMsg(o.IO.Out, render.NewStyles(o.IO.Out), m)
}

// runParkedAction runs discard or replay and shows its outcome (also what
// it did before an error stopped it, and the keys a replay refused). A dry
// run that would change something exits 3.
func runParkedAction(ctx context.Context, o ParkedOptions, act func(context.Context, *connect.Conn, *actions.Selection) (*actions.ParkedOutcome, error)) error {
	conn, sel, err := parkedSelect(ctx, o)
	if err != nil {
		return err
	}
	defer conn.Close()
	out, err := act(ctx, conn, sel)
	if out != nil {
		var rerr error
		if o.Output == "json" {
			rerr = render.ParkedOutcomeJSON(o.IO.Out, out)
		} else {
			rerr = render.ParkedOutcome(o.IO.Out, render.NewStyles(o.IO.Out), out)
		}
		if err == nil {
			err = rerr
		}
	}
	if err == nil && o.DryRun && out.Changed > 0 {
		return &pendingError{}
	}
	return err
}
