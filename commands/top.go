package commands

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/top"
)

// TopOptions is everything lanes top needs: inspect's target and
// connection, and the refresh interval.
type TopOptions struct {
	InspectOptions
	By string // who acts from the view: user@host (lanes top)
}

func topCommand(io *IO) *cli.Command {
	interval := &watchValue{every: DefaultWatchInterval}
	return withUsageErrors(&cli.Command{
		Name:      "top",
		Usage:     "a full-screen view of the lanes: sort, filter, drill down, pause, resume, skip a stuck head, rewind",
		UsageText: "lanes top --stream NAME [--design NAME | -f FILE] [--interval INTERVAL] [connection flags]",
		Description: `A full-screen, refreshing view of a stream's lanes for an operator at a
terminal, read like lanes inspect (the same snapshot and findings): one row
per lane with backlog, in flight, redelivered, lag, rates, the lanes work
instance serving it, its state and its worst finding; the stream's summary
(mappings, generations, a repartition in progress, workers); the findings
with their advice.

Sort by any column (s, S), filter by lane, key, state or instance (/),
find the lane of a key (l: its lane, its last message there and whether
it still waits), and open a lane (enter): its config, its head message
(headers and payload, escaped and cut), its recent rates, its
key-parallel window and its parked messages.

Actions, each asking first with what its dry run says will change: p and
u pause and resume the selected lane, P and U every lane of its design; x
skips the lane's head (t: terminate, p: park; as lanes skip); r rewinds
the lane, R every lane of its design, to a stream sequence or a time
(1042, 13:55, 15m ago; as lanes rewind). Results and errors show in the
status line. ? lists the keys; q or Ctrl-C quits and restores the
terminal.

lanes top needs a terminal; in a pipe or a script use lanes inspect
--watch (or -o json). A lost connection is shown and retried.

Examples:
   lanes top --stream ORDERS
   lanes top -f lanes.yaml --interval 5s
   lanes top --stream ORDERS --design orders --server nats://ops@nats:4222`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "stream", Usage: "stream `NAME` whose lanes to show (default: the design file's stream)"},
			&cli.StringFlag{Name: "design", Usage: "only the lanes of design `NAME` (default: every lane on the stream)"},
			inspectFileFlag,
			&cli.GenericFlag{Name: "interval", Value: interval, Usage: "refresh every `INTERVAL` (e.g. 5s; at least 100ms)", DefaultText: DefaultWatchInterval.String()},
		}, connectFlags()...),
		Action: func(c *cli.Context) error {
			o, err := topOptions(c, io, interval)
			if err != nil {
				return err
			}
			return runTop(c.Context, o)
		},
	})
}

// topOptions turns flags into options, finding the design and stream as
// inspect does, and refuses to start without a terminal.
func topOptions(c *cli.Context, io *IO, interval *watchValue) (TopOptions, error) {
	o := TopOptions{InspectOptions: InspectOptions{IO: io, Conn: connectOptions(c), Stream: c.String("stream"), Design: c.String("design"), Watch: interval.every, Output: "table"}}
	if c.NArg() > 0 {
		return o, usageErrorf("top takes no arguments (got %q); name the stream with --stream", c.Args().First())
	}
	if err := notEmpty(c, "stream", "design"); err != nil {
		return o, err
	}
	if o.Watch <= 0 {
		return o, usageErrorf("--interval: give an interval, e.g. 5s")
	}
	if !io.InTTY || !io.OutTTY {
		return o, usageErrorf("lanes top needs a terminal (stdin and stdout); in a pipe or a script use lanes inspect --watch, or lanes inspect -o json")
	}
	var err error
	if o.Stream, o.Plan, err = designStream(c, io, o.Stream, o.Design); err != nil {
		return o, err
	}
	o.By = whoAmI() + " (lanes top)"
	return o, nil
}

func runTop(ctx context.Context, o TopOptions) error {
	conn, err := connect.Dial(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	return top.Run(ctx, top.Options{
		Conn: conn, Health: o.healthOptions(), Every: o.Watch, By: o.By,
		In: o.IO.In, Out: o.IO.Out, Err: o.IO.Err,
	})
}
