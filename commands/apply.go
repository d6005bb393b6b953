package commands

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/progress"
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
	// NoLock applies without the stream's apply lock (--lock=false). Dry
	// runs never take it.
	NoLock bool
	// LockWait is how long to wait for another apply's lock (0: refuse at once).
	LockWait time.Duration
	// LockTTL is how long the lock outlives this apply if it dies.
	LockTTL time.Duration
}

func applyCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&cli.BoolFlag{Name: "dry-run", Usage: "show what would change and exit: 0 nothing to do, 3 changes pending, 4 apply would refuse", Category: catApply},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "change an existing stream without asking (scripts, CI)", Category: catApply},
		&cli.BoolFlag{Name: "recreate", Usage: "recreate lanes whose change the server forbids (ack policy, max waiting, ...) at their position", Category: catApply},
		&cli.BoolFlag{Name: "prune", Usage: "delete lanes of this design that the design no longer has, once drained", Category: catApply},
		&cli.BoolFlag{Name: "force", Usage: "with --prune, delete lanes that still hold messages; allow a filter or mapping change that strands stored messages", Category: catApply},
		&cli.BoolFlag{Name: "mapping-switched", Usage: "mapping: account: the operator has installed the new mapping on every server (apply cannot check it)", Category: catApply},
		&cli.StringFlag{Name: "missing-lane-start", Usage: "`WHERE` a lane deleted by hand restarts while its generation runs: recorded (after the last message lanes work recorded as processed), now (skip what its partition holds) or start (its generation's start: deliver it all again); without it apply refuses when the partition holds messages", Category: catApply},
		&cli.DurationFlag{Name: "drain-timeout", Value: 5 * time.Minute, Usage: "repartition: wait at most `DURATION` for the old lanes to drain, then stop (exit 5, re-run to continue)", Category: catApply},
		&cli.IntFlag{Name: "concurrency", Value: converge.DefaultConcurrency, Usage: "`N` requests in flight at once (1 to 1024)", Category: catApply},
		&cli.BoolFlag{Name: "lock", Value: true, Usage: "take the stream's apply lock (one apply at a time; KV bucket " + converge.LockBucket + ", nats-server 2.11+); --lock=false skips it", Category: catApply},
		&cli.DurationFlag{Name: "lock-timeout", Usage: "wait up to `DURATION` for another apply's lock instead of refusing at once (exit 4)", Category: catApply},
		&cli.DurationFlag{Name: "lock-ttl", Value: converge.DefaultLockTTL, Usage: "`DURATION` the lock outlives this apply if it dies (renewed while it runs; whole seconds)", Category: catApply},
		outputFlag(applyFormats...),
	)
	flags = append(flags, connectFlags()...)
	return withUsageErrors(&cli.Command{
		Name:      "apply",
		Usage:     "converge a NATS server to the plan: diff first, then create or update safely",
		UsageText: "lanes apply [-f FILE] [design flags] [connection flags] [--dry-run] [--yes] [--recreate] [--prune] [--force] [--missing-lane-start recorded|now|start] [--lock-timeout DURATION] [-o table|json]",
		Description: `Compare the plan with the live server (the stream, and the lanes found by
their metadata or names) and make the server match: create the stream or
update what lanes needs of it (subject transform, max_consumers), create or
update the lanes with many requests in flight. Nothing is deleted unless
asked (--prune). On a terminal apply asks before changing an existing
stream; scripts pass --yes. The design is read as plan reads it: -f FILE
or the design flags; with neither -f nor --subject, $LANES_FILE, else
./lanes.yaml (named on stderr).

One apply at a time per stream: apply takes the stream's lock before it
reads the server and holds it until it ends (also while it asks). Another
apply refuses at once (exit 4, naming the holder) or waits --lock-timeout.
A lock whose apply died expires after --lock-ttl. Dry runs take no lock.

Changing the partition count is a repartition, which apply drives and which
keeps per-key order: the new lanes are created paused, the mapping switches,
the old lanes drain (their workers keep running), then the new lanes resume
and the old ones are deleted. New lanes start after every message their
generation's earlier lanes processed, so a return to an earlier count
replays nothing. Stopped at --drain-timeout (exit 5), a re-run continues
from where it is. So does any interrupted apply, including a --recreate
(finished with or without the flag).

A lane missing while the other lanes of its generation run (deleted by
hand, e.g. nats consumer rm) is not created again at its generation's
start when its partition holds messages: that would deliver the ones it
had processed again, out of order. Apply refuses (exit 4), says how many
messages are stored on its partition and from which stream sequence, and
creates it where --missing-lane-start says: recorded, now or start.

Exit codes: 0 done or nothing to do, 2 bad flags or design, 3 changes pending
(--dry-run), 4 refused (needs --recreate, --force, --missing-lane-start,
--yes or a confirmation, or another apply holds the lock; nothing
changed), 5 not finished (a drain timed out, or a mapping: account
repartition waits for the new mapping and --mapping-switched; re-run),
10-14 connection, authentication, permission, no JetStream, timeout, 130
interrupted. With mapping: account, the first
apply exits 0 and warns: the operator installs the mapping it prints.

Examples:
   lanes apply -f lanes.yaml --dry-run               # review; exit 3 if changes are pending
   lanes apply -f lanes.yaml                          # asks before changing an existing stream
   lanes apply -f lanes.yaml --yes -o json            # CI
   lanes apply -f lanes.yaml --yes --lock-timeout 10m # CI that queues behind another apply
   lanes apply -f lanes.yaml --partitions 16 --yes    # repartition 8 -> 16, order kept
   lanes apply -f lanes.yaml --max-waiting 64 --recreate --yes
   lanes apply -f lanes.yaml --missing-lane-start now --yes   # a lane deleted by hand: skip what is stored
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
			for _, name := range []string{"drain-timeout", "lock-timeout"} {
				if c.Duration(name) < 0 {
					return usageErrorf("--%s must not be negative (got %s)", name, c.Duration(name))
				}
			}
			if ttl := c.Duration("lock-ttl"); ttl < time.Second || ttl%time.Second != 0 {
				return usageErrorf("--lock-ttl %s: use whole seconds, at least 1s (the server's per-key TTL)", ttl)
			}
			if v := c.String("missing-lane-start"); c.IsSet("missing-lane-start") && !slices.Contains(converge.RestartChoices, v) {
				return usageErrorf("--missing-lane-start %q: choose %s", v, strings.Join(converge.RestartChoices, ", "))
			}
			p, err := loadPlan(c, io)
			if err != nil {
				return err
			}
			return runApply(c.Context, ApplyOptions{
				IO: io, Plan: p, Conn: connectOptions(c), DryRun: c.Bool("dry-run"), Yes: c.Bool("yes"), Output: format,
				NoLock: !c.Bool("lock"), LockWait: c.Duration("lock-timeout"), LockTTL: c.Duration("lock-ttl"),
				Converge: converge.Options{
					Recreate:         c.Bool("recreate"),
					Prune:            c.Bool("prune"),
					Force:            c.Bool("force"),
					MappingSwitched:  c.Bool("mapping-switched"),
					DrainTimeout:     c.Duration("drain-timeout"),
					Concurrency:      c.Int("concurrency"),
					MissingLaneStart: c.String("missing-lane-start"),
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
	view := newApplyView(o, conn.Server)
	// The lock comes before the diff: a diff read before another apply
	// finished would be acted on stale.
	if !o.DryRun && !o.NoLock {
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		lock, err := converge.AcquireLock(ctx, conn, o.Plan.Stream.Name, lockOwner(o), converge.LockOptions{TTL: o.LockTTL, Wait: o.LockWait, OnLost: stop})
		if err != nil {
			return refusedByLock(ctx, conn, o, view, err)
		}
		defer lock.Release(context.WithoutCancel(ctx))
	}
	bars := applyProgress(o.IO)
	o.Converge.Progress = func(p converge.Progress) { bars.Update(phaseText[p.Phase], p.Done, p.Total) }
	diff, err := converge.Compare(ctx, conn, o.Plan, o.Converge)
	if err != nil {
		return err
	}
	if err := view.diff(diff); err != nil {
		return err
	}
	out := &applyOutcome{diff: diff, needsConfirmation: needsConfirmation(o, diff)}
	switch {
	case o.DryRun:
		if err := view.done(out); err != nil {
			return err
		}
		return dryRunOutcome(diff)
	case diff.Refused():
		out.err = &converge.RefusedError{Reasons: diff.Refusals}
		view.done(out)
		return out.err
	case diff.Pending():
		if err := confirm(ctx, o, conn.Server, diff); err != nil {
			out.err = err
			view.done(out)
			return err
		}
	}
	// Also when nothing is pending: lanes that could not be read make the
	// apply incomplete.
	out.res, out.err = converge.Execute(ctx, conn, diff)
	bars.Finish()
	if err := view.done(out); out.err == nil {
		return err
	}
	return out.err
}

// phaseText names apply's steps in its progress.
var phaseText = map[converge.Phase]string{
	converge.PhaseLanes:  "lanes",
	converge.PhaseDrain:  "old lanes' backlog processed",
	converge.PhaseResume: "resuming new lanes",
	converge.PhaseDelete: "deleting lanes",
}

// applyProgress shows apply's steps on stderr: bars on a terminal, plain
// lines in a CI log. A drain's pace says nothing of its end.
func applyProgress(io *IO) *progress.Meter {
	return progress.New(io.Err, io.ErrTTY, "apply").NoETA(phaseText[converge.PhaseDrain])
}

// refusedByLock ends an apply that could not take the lock: it shows the
// diff it would have made (read only), and refuses (exit 4).
func refusedByLock(ctx context.Context, conn *connect.Conn, o ApplyOptions, view applyView, err error) error {
	var locked *converge.LockedError
	var unsupported *converge.LockUnsupportedError
	if !errors.As(err, &locked) && !errors.As(err, &unsupported) {
		return err
	}
	out := &applyOutcome{err: err}
	if locked != nil {
		out.holder = &locked.Holder
	}
	if diff, cerr := converge.Compare(ctx, conn, o.Plan, o.Converge); cerr == nil {
		out.diff, out.needsConfirmation = diff, needsConfirmation(o, diff)
		if err := view.diff(diff); err != nil {
			return err
		}
	}
	view.done(out)
	return out.err
}

func lockOwner(o ApplyOptions) converge.LockOwner {
	host, _ := os.Hostname()
	return converge.LockOwner{Host: host, PID: os.Getpid(), Design: o.Plan.Design.Name, Command: "lanes apply"}
}

// needsConfirmation: the diff changes an existing stream or its lanes, so
// apply asks on a terminal (and refuses without one) unless --yes is given.
func needsConfirmation(o ApplyOptions, d *converge.Diff) bool {
	return !o.Yes && d.StreamExists() && (d.Pending() || d.Refused())
}

// applyOutcome is everything the view reports at the end.
type applyOutcome struct {
	diff              *converge.Diff // nil when none was computed
	res               *converge.Result
	err               error
	needsConfirmation bool
	holder            *converge.LockOwner
}

// applyView shows the diff and what apply did, in the format chosen once
// with -o: a table as things happen, or one document at the end.
type applyView interface {
	diff(d *converge.Diff) error // before anything changes
	done(o *applyOutcome) error
}

func newApplyView(o ApplyOptions, server string) applyView {
	switch o.Output {
	case "json":
		return &docView{o: o, server: server, encode: render.JSON}
	case "yaml": // plan --server
		return &docView{o: o, server: server, encode: render.YAML}
	}
	return &tableView{out: o.IO.Out, server: server}
}

type tableView struct {
	out    io.Writer
	server string
}

// diff writes the whole table at once: with stdout a pipe, its reader
// gets it in one piece before apply asks (see drainPipe).
func (v *tableView) diff(d *converge.Diff) error {
	var b bytes.Buffer
	if err := render.DiffTable(&b, render.NewStyles(v.out), v.server, d); err != nil {
		return err
	}
	_, err := v.out.Write(b.Bytes())
	return err
}

func (v *tableView) done(o *applyOutcome) error {
	if o.res != nil && (o.diff.Pending() || o.err != nil) {
		render.ResultTable(v.out, render.NewStyles(v.out), o.res, o.err)
	}
	return nil
}

type docView struct {
	o      ApplyOptions
	server string
	encode func(w io.Writer, v any) error
}

func (v *docView) diff(*converge.Diff) error { return nil }

func (v *docView) done(o *applyOutcome) error {
	doc := render.ApplyDoc{Server: v.server, DryRun: v.o.DryRun, Diff: o.diff, Result: o.res,
		NeedsConfirmation: o.needsConfirmation, LockHolder: o.holder}
	if d := o.diff; d != nil {
		doc.Pending = d.Pending() || d.Refused()
	}
	if o.res != nil {
		doc.Remaining = append(append(doc.Remaining, o.res.Remaining...), o.res.Incomplete...)
		for _, f := range o.res.Failures {
			doc.Remaining = append(doc.Remaining, fmt.Sprintf("retry %s on lane %s (the server refused: %s)", f.Action, f.Lane, f.Error))
		}
	}
	if o.err != nil {
		doc.Error = o.err.Error()
	}
	doc.Status, doc.Refused, doc.Reasons = outcomeStatus(v.o, o)
	return v.encode(v.o.IO.Out, doc)
}

// outcomeStatus sums up an apply in one word, and says why it refused or
// did not finish.
func outcomeStatus(opts ApplyOptions, o *applyOutcome) (status string, refused bool, reasons []string) {
	var re *converge.RefusedError
	var ie *converge.IncompleteError
	var se *converge.StoppedError
	d := o.diff
	if d == nil { // the lock refused, and the diff could not be read either
		return "refused", true, []string{o.err.Error()}
	}
	switch {
	case opts.DryRun && d.Refused():
		return "refused", true, d.Refusals
	case opts.DryRun && d.Pending():
		return "pending", false, nil
	case opts.DryRun && len(d.Unavailable()) > 0:
		return "incomplete", false, []string{fmt.Sprintf("%d lanes could not be read; their state is unknown", len(d.Unavailable()))}
	case opts.DryRun:
		return "nothing_to_do", false, nil
	case o.err == nil && d.Pending():
		return "applied", false, nil
	case o.err == nil:
		return "nothing_to_do", false, nil
	case errors.As(o.err, &re):
		return "refused", true, re.Reasons
	case exitCode(o.err) == ExitRefused:
		return "refused", true, []string{strings.TrimSpace(o.err.Error())}
	case errors.As(o.err, &ie):
		return "incomplete", false, ie.Reasons
	case errors.As(o.err, &se):
		return "stopped", false, []string{se.Err.Error()}
	}
	return "failed", false, []string{o.err.Error()}
}

// dryRunOutcome is what a dry run found, as the error that ends it: apply
// would refuse, changes are pending, some lanes could not be read, or
// nothing (nil).
func dryRunOutcome(d *converge.Diff) error {
	switch {
	case d.Refused():
		return &refusedError{fmt.Errorf("apply would refuse:\n  - %s", strings.Join(d.Refusals, "\n  - "))}
	case d.Pending():
		return &pendingError{}
	case len(d.Unavailable()) > 0:
		return &incompleteError{fmt.Errorf("%d lanes could not be read; their state is unknown", len(d.Unavailable()))}
	}
	return nil
}

// confirm asks on a terminal before changing an existing stream; without
// a terminal it refuses unless --yes was given.
func confirm(ctx context.Context, o ApplyOptions, server string, d *converge.Diff) error {
	if o.Yes || !d.StreamExists() {
		return nil
	}
	if !o.IO.InTTY {
		return &refusedError{fmt.Errorf(
			"stream %s already exists on %s and apply would change it; nothing was changed: review with --dry-run, then re-run with --yes (no terminal to ask on)",
			d.Stream.Name, server)}
	}
	drainPipe(o.IO.Out, 2*time.Second)
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
	return &refusedError{errors.New("not confirmed; nothing was changed")}
}
