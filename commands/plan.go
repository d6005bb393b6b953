package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

var planFormats = []string{"table", "json", "yaml", "conf", "nsc", "nack"}

// PlanOptions is everything lanes plan needs.
type PlanOptions struct {
	IO       *IO
	Plan     *planner.Plan
	KeysPath string // "-" for stdin
	Key      string
	Output   string
	EmitDir  string
	Conn     connect.Options // used when a server is given: show the diff
}

func planCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&cli.StringFlag{Name: "keys", Usage: "assign every subject (or bare key) in `FILE` to its lane; - reads stdin; a line may end with a message count", Category: "Keys"},
		&cli.StringFlag{Name: "key", Usage: "which lane is `SUBJECT` in", Category: "Keys"},
		outputFlag(planFormats...),
		&cli.StringFlag{Name: "emit-dir", Usage: "write natscli-ready stream.json and one LANE.json per lane into `DIR`", Category: catOutput},
	)
	// plan stays offline unless --server or --context is on the command
	// line: NATS_URL in the environment alone does not make it connect.
	flags = append(flags, withoutServerEnv(connectFlags())...)
	return withUsageErrors(&cli.Command{
		Name:      "plan",
		Usage:     "compute the lane layout, key assignment, skew and definitions",
		UsageText: "lanes plan [-f FILE] [design flags] [--keys FILE|-] [--key SUBJECT] [-o table|json|yaml|conf|nsc|nack] [--emit-dir DIR] [--server URL]",
		Description: `Plan a keyed-order design: the partition() mapping, the stream, and one
serial lane (durable pull consumer, MaxAckPending=1) per partition.
Nothing is sent to a server unless --server or --context is given on the
command line (NATS_URL alone does not count), in which case the plan is
compared with the live state, as apply --dry-run does.

The design is -f FILE with the design flags on top, or the flags alone
(--subject at least). With neither -f nor --subject, plan reads $LANES_FILE,
else ./lanes.yaml, and names it on stderr.

Examples:
   lanes plan                                   # ./lanes.yaml (or $LANES_FILE)
   lanes plan --name orders --subject 'msgs.received_from.*' --partitions 8
   lanes plan -f examples/seed/lanes.yaml --keys examples/seed/keys.txt
   lanes plan -f lanes.yaml --key msgs.received_from.alice
   lanes plan -f lanes.yaml -o json | jq '.lanes[].filter'
   lanes plan -f lanes.yaml --mapping account -o conf
   lanes plan -f lanes.yaml -o nack | kubectl apply -f -
   lanes plan -f lanes.yaml --emit-dir defs/ && nats stream add --config defs/stream.json`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("plan takes no arguments (got %q); flags go before or after, e.g. lanes plan -f lanes.yaml", c.Args().First())
			}
			if err := notEmpty(c, "key", "keys", "emit-dir"); err != nil {
				return err
			}
			if c.String("keys") == input.Stdin && c.String("file") == input.Stdin {
				return usageErrorf("-f - and --keys - both read stdin: give one of them a file")
			}
			format, err := outputFormat(c, planFormats...)
			if err != nil {
				return err
			}
			p, err := loadPlan(c, io)
			if err != nil {
				return err
			}
			opts := PlanOptions{IO: io, Plan: p, KeysPath: c.String("keys"), Key: c.String("key"),
				Output: format, EmitDir: c.String("emit-dir"), Conn: connectOptions(c)}
			if opts.Conn.Named() { // the command line's --server or --context only
				return runPlanDiff(c.Context, opts)
			}
			return runPlan(c.Context, opts)
		},
	})
}

func runPlan(ctx context.Context, o PlanOptions) error {
	if o.Key != "" && o.KeysPath != "" {
		return usageErrorf("--key and --keys cannot be combined: --key answers for one subject, --keys for a file")
	}
	view := newPlanView(o)
	if o.Key != "" {
		a, err := planner.NewAssigner(o.Plan).Assign(o.Key)
		if err != nil {
			var le *planner.LineError
			if errors.As(err, &le) {
				return usageErrorf("--key %q does not match the subject pattern %s", o.Key, o.Plan.Design.Subject)
			}
			return err
		}
		return view.key(render.NewKeyAnswer(o.Plan, a))
	}
	if err := view.plan(ctx); err != nil {
		return err
	}
	if o.EmitDir != "" {
		return emitDefinitions(o)
	}
	return nil
}

// planView shows the plan in the format chosen once with -o: the whole
// plan (with the keys' assignment and skew when --keys is given), or
// where one subject goes (--key).
type planView interface {
	plan(ctx context.Context) error
	key(ans render.KeyAnswer) error
}

func newPlanView(o PlanOptions) planView {
	switch o.Output {
	case "json":
		return &planDocView{o: o, encode: render.JSON}
	case "yaml":
		return &planDocView{o: o, encode: render.YAML}
	case "conf":
		return &planConfigView{o: o, write: render.Conf}
	case "nsc":
		return &planConfigView{o: o, write: render.NSC}
	case "nack":
		return &planConfigView{o: o, write: render.NACK}
	}
	return &planTableView{o: o}
}

// planTableView is the table: the layout, and the skew with --keys.
type planTableView struct{ o PlanOptions }

func (v *planTableView) plan(ctx context.Context) error {
	var skew *planner.Skew
	if v.o.KeysPath != "" {
		tally, err := assignKeys(ctx, v.o, nil)
		if err != nil {
			return err
		}
		k := tally.Skew(v.o.Plan, 10)
		skew = &k
	}
	return render.PlanTable(v.o.IO.Out, render.NewStyles(v.o.IO.Out), v.o.Plan, skew)
}

func (v *planTableView) key(ans render.KeyAnswer) error {
	render.KeyAnswerText(v.o.IO.Out, render.NewStyles(v.o.IO.Out), ans)
	return nil
}

// planDocView is one JSON or YAML document.
type planDocView struct {
	o      PlanOptions
	encode func(w io.Writer, v any) error
}

func (v *planDocView) plan(ctx context.Context) error { return planDocument(ctx, v.o) }

func (v *planDocView) key(ans render.KeyAnswer) error { return v.encode(v.o.IO.Out, ans) }

// planConfigView is the mapping as server configuration (conf, nsc), or
// the stream and lanes as Kubernetes resources for NACK (nack).
type planConfigView struct {
	o     PlanOptions
	write func(w io.Writer, p *planner.Plan) error
}

func (v *planConfigView) plan(context.Context) error { return v.write(v.o.IO.Out, v.o.Plan) }

func (v *planConfigView) key(render.KeyAnswer) error {
	return usageErrorf("--key prints table, json or yaml, not %s", v.o.Output)
}

// planDocument writes the whole plan as JSON or YAML. With --keys, every
// line is checked before the first byte is written, so a bad line leaves
// stdout empty; the input is read once (it may be a pipe): each placed
// line goes to a spool, and the assignments are then streamed from it.
func planDocument(ctx context.Context, o PlanOptions) error {
	if o.KeysPath == "" {
		s, err := render.NewPlanStream(o.IO.Out, o.Output, o.Plan)
		if err != nil {
			return err
		}
		return s.Close(nil)
	}
	spool, err := keyfile.NewSpool(keysFlag)
	if err != nil {
		return err
	}
	defer spool.Close()
	tally, err := assignKeys(ctx, o, spool.Add)
	if err != nil {
		return err
	}
	s, err := render.NewPlanStream(o.IO.Out, o.Output, o.Plan)
	if err != nil {
		return err
	}
	if err := spool.Replay(ctx, s.Assignment); err != nil {
		return err
	}
	k := tally.Skew(o.Plan, 10)
	return s.Close(&k)
}

// keysFlag is plan's keys input, as its errors name it.
const keysFlag = "--keys"

// assignKeys reads the keys input once, placing and counting every line
// and handing each to sink (if any).
func assignKeys(ctx context.Context, o PlanOptions, sink func(planner.Parsed) error) (*planner.Tally, error) {
	r, err := keyfile.Open(ctx, keyfile.Input{Path: o.KeysPath, Stdin: o.IO.In, Flag: keysFlag}, o.Plan)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tally := planner.NewTally(o.Plan.Design.Partitions)
	err = r.Each(ctx, func(p planner.Parsed) error {
		tally.Add(p)
		if sink != nil {
			return sink(p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tally, nil
}

// emitDefinitions writes stream.json and one file per lane into the directory.
func emitDefinitions(o PlanOptions) error {
	files, err := render.Definitions(o.Plan)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.EmitDir, 0o755); err != nil {
		return fmt.Errorf("--emit-dir: %w", err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(o.EmitDir, n), files[n], 0o644); err != nil {
			return fmt.Errorf("--emit-dir: %w", err)
		}
	}
	fmt.Fprintf(o.IO.Err, "wrote %d definitions to %s (nats stream add --config %s; nats consumer add %s --config %s)\n",
		len(files), o.EmitDir, filepath.Join(o.EmitDir, "stream.json"), o.Plan.Stream.Name, filepath.Join(o.EmitDir, "<lane>.json"))
	return nil
}
