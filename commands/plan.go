package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

var planFormats = []string{"table", "json", "yaml", "conf", "nsc"}

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
		&cli.StringFlag{Name: "emit-dir", Usage: "write natscli-ready stream.json and <lane>.json files into `DIR`", Category: catOutput},
	)
	// plan stays offline unless --server or --context is on the command
	// line: NATS_URL in the environment alone does not make it connect.
	flags = append(flags, withoutServerEnv(connectFlags())...)
	return withUsageErrors(&cli.Command{
		Name:      "plan",
		Usage:     "compute the lane layout, key assignment, skew and definitions",
		UsageText: "lanes plan [-f FILE] [design flags] [--keys FILE|-] [--key SUBJECT] [-o table|json|yaml|conf|nsc] [--emit-dir DIR] [--server URL]",
		Description: `Plan a keyed-order design: the partition() mapping, the stream, and one
serial lane (durable pull consumer, MaxAckPending=1) per partition.
Nothing is sent to a server unless --server or --context is given on the
command line (NATS_URL alone does not count), in which case the plan is
compared with the live state, as apply --dry-run does.

Examples:
   lanes plan --name orders --subject 'msgs.received_from.*' --partitions 8
   lanes plan -f examples/seed/lanes.yaml --keys examples/seed/keys.txt
   lanes plan -f lanes.yaml --key msgs.received_from.alice
   lanes plan -f lanes.yaml -o json | jq '.lanes[].filter'
   lanes plan -f lanes.yaml --mapping account -o conf
   lanes plan -f lanes.yaml --emit-dir defs/ && nats stream add --config defs/stream.json`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("plan takes no arguments (got %q); flags go before or after, e.g. lanes plan -f lanes.yaml", c.Args().First())
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
			if opts.Conn.Given() {
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
	if o.Key != "" {
		return planKey(o)
	}
	if err := renderPlan(ctx, o); err != nil {
		return err
	}
	if o.EmitDir != "" {
		return emitDefinitions(o)
	}
	return nil
}

// renderPlan prints the plan in the chosen format.
func renderPlan(ctx context.Context, o PlanOptions) error {
	switch o.Output {
	case "conf":
		return render.Conf(o.IO.Out, o.Plan)
	case "nsc":
		return render.NSC(o.IO.Out, o.Plan)
	case "json", "yaml":
		return planDocument(ctx, o)
	}
	var skew *planner.Skew
	if o.KeysPath != "" {
		tally, err := assignKeys(ctx, o, nil)
		if err != nil {
			return err
		}
		k := tally.Skew(o.Plan, 10)
		skew = &k
	}
	return render.PlanTable(o.IO.Out, render.NewStyles(o.IO.Out), o.Plan, skew)
}

func planKey(o PlanOptions) error {
	a, err := planner.NewAssigner(o.Plan).Assign(o.Key)
	if err != nil {
		var le *planner.LineError
		if errors.As(err, &le) {
			return usageErrorf("--key %q does not match the subject pattern %s", o.Key, o.Plan.Design.Subject)
		}
		return err
	}
	ans := render.NewKeyAnswer(o.Plan, a)
	switch o.Output {
	case "json":
		return render.JSON(o.IO.Out, ans)
	case "yaml":
		return render.YAML(o.IO.Out, ans)
	case "table":
		render.KeyAnswerText(o.IO.Out, render.NewStyles(o.IO.Out), ans)
		return nil
	}
	return usageErrorf("--key prints table, json or yaml, not %s", o.Output)
}

// planDocument writes the whole plan as JSON or YAML. With --keys, every
// line is validated first so a bad line leaves stdout empty; the second pass
// streams assignments without holding them.
func planDocument(ctx context.Context, o PlanOptions) error {
	if o.KeysPath == "" {
		s, err := render.NewPlanStream(o.IO.Out, o.Output, o.Plan)
		if err != nil {
			return err
		}
		return s.Close(nil)
	}
	in, cleanup, err := validatedKeys(ctx, o)
	if err != nil {
		return err
	}
	defer cleanup()
	s, err := render.NewPlanStream(o.IO.Out, o.Output, o.Plan)
	if err != nil {
		return err
	}
	o.KeysPath = in
	tally, err := assignKeys(ctx, o, func(p planner.Parsed) error {
		return s.Assignment(p.Subject, p.Key, p.Partition, p.Count)
	})
	if err != nil {
		return err
	}
	k := tally.Skew(o.Plan, 10)
	return s.Close(&k)
}

// validatedKeys checks every line and returns a file to read them again
// from: the file itself, or a spool of stdin.
func validatedKeys(ctx context.Context, o PlanOptions) (string, func(), error) {
	if o.KeysPath != "-" {
		return o.KeysPath, func() {}, checkKeys(ctx, o)
	}
	spool, err := os.CreateTemp("", "lanes-keys-*")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { spool.Close(); os.Remove(spool.Name()) }
	tee := o
	tee.IO = &IO{In: io.TeeReader(o.IO.In, spool)}
	if err := checkKeys(ctx, tee); err != nil {
		cleanup()
		return "", nil, err
	}
	return spool.Name(), cleanup, nil
}

// assignKeys places and counts every line of the keys input, handing each
// to sink (if any).
func assignKeys(ctx context.Context, o PlanOptions, sink func(planner.Parsed) error) (*planner.Tally, error) {
	tally := planner.NewTally(o.Plan.Design.Partitions)
	err := scanKeys(ctx, o, func(p planner.Parsed) error {
		tally.Add(p)
		if sink != nil {
			return sink(p)
		}
		return nil
	})
	return tally, err
}

// checkKeys only checks that every line can be placed.
func checkKeys(ctx context.Context, o PlanOptions) error {
	return scanKeys(ctx, o, func(planner.Parsed) error { return nil })
}

// scanKeys reads the keys input (a file, or stdin for "-") and places each line.
func scanKeys(ctx context.Context, o PlanOptions, each func(planner.Parsed) error) error {
	var r io.Reader = o.IO.In
	name := "stdin"
	if o.KeysPath != "-" {
		f, err := os.Open(o.KeysPath)
		if err != nil {
			return usageErrorf("--keys: %v", err)
		}
		defer f.Close()
		r, name = f, filepath.Base(o.KeysPath)
	}
	a := planner.NewAssigner(o.Plan)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if line&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		p, ok, err := a.Place(line, sc.Bytes())
		if err != nil {
			return usageErrorf("--keys %s %v", name, err)
		}
		if !ok {
			continue
		}
		if err := each(p); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return usageErrorf("--keys %s: line %d: %v", name, line+1, err)
	}
	return nil
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
	fmt.Fprintf(o.IO.Err, "wrote %d definitions to %s (nats stream add --config %s; nats consumer add %s --config <lane>.json)\n",
		len(files), o.EmitDir, filepath.Join(o.EmitDir, "stream.json"), o.Plan.Stream.Name)
	return nil
}
