package commands

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
)

// The operator's actions (pause, resume, skip, rewind, parked) share how
// they name their lanes: the design's stream and name (--stream and
// --design, or a design file as inspect finds it), and optionally --lanes
// and --key; --dry-run shows what would change (exit 3 when something
// would); -o json is for scripts.

var actionFormats = []string{"table", "json"}

// ActionOptions is what every action needs: the connection, its lanes,
// whether to only show what would change, and the output.
type ActionOptions struct {
	IO     *IO
	Conn   connect.Options
	Target actions.Target
	DryRun bool
	Output string
}

// actionFlags are the flags every action takes, before its own.
func actionFlags(own ...cli.Flag) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "stream", Usage: "the design's stream `NAME` (default: the design file's stream)"},
		&cli.StringFlag{Name: "design", Usage: "the design `NAME` whose lanes to act on (default: the design file's)"},
		inspectFileFlag,
		&cli.StringSliceFlag{Name: "lanes", Usage: "only these lanes: `NAME`s or partition numbers of the current partitioning, comma-separated (default: every lane of the current partitioning)"},
		&cli.StringSliceFlag{Name: "key", Usage: "only the lanes that hold `KEY` (alice, or a subject as published; repeatable)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "show what would change, lane by lane, and change nothing (exit 3 when something would change)"},
		outputFlag(actionFormats...),
	}
	return append(append(flags, own...), connectFlags()...)
}

// actionOptions turns the shared flags into options and validates them.
func actionOptions(c *cli.Context, io *IO) (ActionOptions, error) {
	o := ActionOptions{IO: io, Conn: connectOptions(c), DryRun: c.Bool("dry-run"),
		Target: actions.Target{Stream: c.String("stream"), Design: c.String("design"), Keys: c.StringSlice("key")}}
	if c.NArg() > 0 {
		return o, usageErrorf("%s takes no arguments (got %q); see lanes %s --help", c.Command.Name, c.Args().First(), c.Command.Name)
	}
	if err := notEmpty(c, "stream", "design"); err != nil {
		return o, err
	}
	for _, v := range c.StringSlice("lanes") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name == "" {
				return o, usageErrorf("--lanes %q: an empty lane name", v)
			}
			o.Target.Lanes = append(o.Target.Lanes, name)
		}
	}
	for _, k := range o.Target.Keys {
		if strings.TrimSpace(k) == "" {
			return o, usageErrorf("--key: an empty key")
		}
	}
	var err error
	if o.Output, err = outputFormat(c, actionFormats...); err != nil {
		return o, err
	}
	stream, plan, err := designStream(c, io, o.Target.Stream, o.Target.Design)
	if err != nil {
		return o, err
	}
	o.Target.Stream = stream
	if plan != nil {
		o.Target.Design = plan.Design.Name
	}
	if o.Target.Design == "" {
		return o, usageErrorf("name the lanes' design: --design NAME (with --stream), or -f FILE (or a lanes.yaml in this directory, or LANES_FILE=FILE)")
	}
	return o, nil
}
