package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

var applyFormats = []string{"table", "json"}

const catApply = "Apply"

// ApplyOptions is everything lanes apply needs.
type ApplyOptions struct {
	IO     *IO
	Plan   *planner.Plan
	Conn   connect.Options
	DryRun bool
	Yes    bool
	Output string // table, json (yaml for plan --server)
	// Converge says what apply may do (recreate, prune, force, ...).
	Converge converge.Options
}

func applyCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&cli.BoolFlag{Name: "dry-run", Usage: "show what would change and exit: 0 nothing to do, 3 changes pending, 4 apply would refuse", Category: catApply},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "change an existing stream without asking (scripts, CI)", Category: catApply},
		&cli.BoolFlag{Name: "recreate", Usage: "recreate lanes whose change the server forbids (ack policy, max waiting, ...) at their position", Category: catApply},
		&cli.BoolFlag{Name: "prune", Usage: "delete lanes of this design that the design no longer has, once drained", Category: catApply},
		&cli.BoolFlag{Name: "force", Usage: "with --prune, delete lanes that still hold messages; allow a filter or mapping change that strands stored messages", Category: catApply},
		&cli.BoolFlag{Name: "mapping-switched", Usage: "mapping: account: the operator has installed the new mapping on every server (apply cannot check it)", Category: catApply},
		&cli.DurationFlag{Name: "drain-timeout", Value: 5 * time.Minute, Usage: "repartition: how long to wait for the old lanes to drain before stopping (exit 5, re-run to continue)", Category: catApply},
		&cli.IntFlag{Name: "concurrency", Value: converge.DefaultConcurrency, Usage: "requests in flight at once", Category: catApply},
		outputFlag(applyFormats...),
	)
	flags = append(flags, connectFlags()...)
	return withUsageErrors(&cli.Command{
		Name:      "apply",
		Usage:     "converge a NATS server to the plan: diff first, then create or update safely",
		UsageText: "lanes apply [-f FILE] [design flags] [connection flags] [--dry-run] [--yes] [--recreate] [--prune] [--force] [-o table|json]",
		Description: `Compare the plan with the live server (the stream, and the lanes found by
their metadata or names) and make the server match: create the stream or
update what lanes needs of it (subject transform, max_consumers), create or
update the lanes with many requests in flight. Nothing is deleted unless
asked (--prune). On a terminal apply asks before changing an existing
stream; scripts pass --yes.

Changing the partition count is a repartition, which apply drives and which
keeps per-key order: the new lanes are created paused, the mapping switches,
the old lanes drain (their workers keep running), then the new lanes resume
and the old ones are deleted. Stopped at --drain-timeout (exit 5), a re-run
continues from where it is. So does any interrupted apply.

Exit codes: 0 done or nothing to do, 2 bad flags or design, 3 changes pending
(--dry-run), 4 refused (needs --recreate, --force, --yes or a confirmation;
nothing changed), 5 not finished (re-run), 10-14 connection, authentication,
permission, no JetStream, timeout.

Examples:
   lanes apply -f lanes.yaml --dry-run               # review; exit 3 if changes are pending
   lanes apply -f lanes.yaml                          # asks before changing an existing stream
   lanes apply -f lanes.yaml --yes -o json            # CI
   lanes apply -f lanes.yaml --partitions 16 --yes    # repartition 8 -> 16, order kept
   lanes apply -f lanes.yaml --max-waiting 64 --recreate --yes
   lanes apply -f lanes.yaml --mapping account        # then install the printed mapping and
   lanes apply -f lanes.yaml --mapping account --mapping-switched
   lanes apply -f lanes.yaml --context prod --creds ~/prod.creds`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("apply takes no arguments (got %q); flags go before or after, e.g. lanes apply -f lanes.yaml", c.Args().First())
			}
			format, err := outputFormat(c, applyFormats...)
			if err != nil {
				return err
			}
			if n := c.Int("concurrency"); n < 1 || n > 1024 {
				return usageErrorf("--concurrency %d: choose 1 to 1024", n)
			}
			if c.Duration("drain-timeout") < 0 {
				return usageErrorf("--drain-timeout must not be negative")
			}
			p, err := loadPlan(c, io)
			if err != nil {
				return err
			}
			return runApply(c.Context, ApplyOptions{
				IO: io, Plan: p, Conn: connectOptions(c), DryRun: c.Bool("dry-run"), Yes: c.Bool("yes"), Output: format,
				Converge: converge.Options{
					Recreate:        c.Bool("recreate"),
					Prune:           c.Bool("prune"),
					Force:           c.Bool("force"),
					MappingSwitched: c.Bool("mapping-switched"),
					DrainTimeout:    c.Duration("drain-timeout"),
					Concurrency:     c.Int("concurrency"),
				},
			})
		},
	})
}

// runPlanDiff is lanes plan --server: the same diff as apply --dry-run.
func runPlanDiff(ctx context.Context, o PlanOptions) error {
	switch {
	case o.Key != "" || o.KeysPath != "":
		return usageErrorf("--key and --keys answer from the plan alone: drop --server (or NATS_URL, --context) to use them")
	case o.EmitDir != "":
		return usageErrorf("--emit-dir writes the plan's definitions: drop --server (or NATS_URL, --context) to use it")
	case o.Output != "table" && o.Output != "json" && o.Output != "yaml":
		return usageErrorf("with --server, plan shows the diff as table, json or yaml, not %s", o.Output)
	}
	return runApply(ctx, ApplyOptions{IO: o.IO, Plan: o.Plan, Conn: o.Conn, DryRun: true, Output: o.Output})
}

func runApply(ctx context.Context, o ApplyOptions) error {
	conn, err := connect.Open(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	bars := newProgressBars(o.IO)
	o.Converge.Progress = bars.update
	diff, err := converge.Compare(ctx, conn, o.Plan, o.Converge)
	if err != nil {
		return err
	}
	view := newApplyView(o, conn.Server)
	if err := view.diff(diff); err != nil {
		return err
	}
	switch {
	case o.DryRun:
		return dryRunExit(diff, view.done(diff, nil))
	case diff.Refused():
		view.done(diff, nil)
		return withCode(ExitRefused, &converge.RefusedError{Reasons: diff.Refusals})
	case diff.Pending():
		if err := confirm(ctx, o, conn.Server, diff); err != nil {
			view.done(diff, nil)
			return err
		}
	}
	// Also when nothing is pending: lanes that could not be read make the
	// apply incomplete.
	res, err := converge.Execute(ctx, conn, diff)
	bars.finish()
	return applyExit(view.done(diff, res), err)
}

// applyView shows the diff and what apply did, in the format chosen once
// with -o: a table as things happen, or one document at the end.
type applyView interface {
	diff(d *converge.Diff) error                       // before anything changes
	done(d *converge.Diff, res *converge.Result) error // res is nil when nothing ran
}

func newApplyView(o ApplyOptions, server string) applyView {
	if o.Output == "table" {
		return &tableView{out: o.IO.Out, server: server}
	}
	return &docView{o: o, server: server}
}

type tableView struct {
	out    io.Writer
	server string
}

func (v *tableView) diff(d *converge.Diff) error {
	return render.DiffTable(v.out, render.NewStyles(v.out), v.server, d)
}

func (v *tableView) done(d *converge.Diff, res *converge.Result) error {
	if res != nil && d.Pending() {
		render.ResultTable(v.out, render.NewStyles(v.out), res)
	}
	return nil
}

type docView struct {
	o      ApplyOptions
	server string
}

func (v *docView) diff(*converge.Diff) error { return nil }

func (v *docView) done(d *converge.Diff, res *converge.Result) error {
	doc := render.ApplyDoc{Server: v.server, DryRun: v.o.DryRun, Pending: d.Pending(), Diff: d, Result: res}
	if v.o.Output == "yaml" {
		return render.YAML(v.o.IO.Out, doc)
	}
	return render.JSON(v.o.IO.Out, doc)
}

// dryRunExit: 4 when apply would refuse, 3 when changes are pending, 5
// when some lanes could not be read, else 0.
func dryRunExit(d *converge.Diff, err error) error {
	switch {
	case err != nil:
		return err
	case d.Refused():
		return withCode(ExitRefused, fmt.Errorf("apply would refuse:\n  - %s", strings.Join(d.Refusals, "\n  - ")))
	case d.Pending():
		return silentExit(ExitChanges)
	case len(d.Unavailable()) > 0:
		return withCode(ExitIncomplete, fmt.Errorf("%d lanes could not be read; their state is unknown", len(d.Unavailable())))
	}
	return nil
}

// applyExit maps converge's outcomes to exit codes; connection errors keep theirs.
func applyExit(renderErr, err error) error {
	var refused *converge.RefusedError
	var incomplete *converge.IncompleteError
	switch {
	case err == nil:
		return renderErr
	case errors.As(err, &refused):
		return withCode(ExitRefused, err)
	case errors.As(err, &incomplete):
		return withCode(ExitIncomplete, err)
	}
	return err
}

// confirm asks on a terminal before changing an existing stream; without
// a terminal it refuses unless --yes was given.
func confirm(ctx context.Context, o ApplyOptions, server string, d *converge.Diff) error {
	if o.Yes || !d.StreamExists() {
		return nil
	}
	if !o.IO.InTTY {
		return withCode(ExitRefused, fmt.Errorf(
			"stream %s already exists on %s and apply would change it; nothing was changed: review with --dry-run, then re-run with --yes (no terminal to ask on)",
			d.Stream.Name, server))
	}
	fmt.Fprintf(o.IO.Err, "Apply these changes to stream %s on %s? [y/N] ", d.Stream.Name, server)
	answer := make(chan string, 1)
	go func() { // Ctrl-C must not wait for Enter
		line, _ := bufio.NewReader(o.IO.In).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.IO.Err)
		return context.Cause(ctx)
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return nil
		}
	}
	return withCode(ExitRefused, errors.New("not confirmed; nothing was changed"))
}
