package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

var inspectFormats = []string{"table", "json", "prometheus"}

// DefaultWatchInterval is the refresh of --watch without a value.
const DefaultWatchInterval = 2 * time.Second

// InspectOptions is everything lanes inspect needs.
type InspectOptions struct {
	IO     *IO
	Conn   connect.Options
	Stream string
	Design string        // only this design's lanes ("" = all)
	Plan   *planner.Plan // the design file, when given
	Key    string        // --key: which lane holds this subject
	Watch  time.Duration // refresh interval; 0 = one report
	FailOn []health.Threshold
	Output string
}

func inspectCommand(io *IO) *cli.Command {
	watch := &watchValue{}
	flags := []cli.Flag{
		&cli.StringFlag{Name: "stream", Usage: "stream `NAME` whose lanes to inspect (default: the design file's stream)"},
		&cli.StringFlag{Name: "design", Usage: "only the lanes of design `NAME` (default: every lane on the stream)"},
		inspectFileFlag,
		&cli.StringFlag{Name: "key", Usage: "which lane holds `SUBJECT` (as published, or a bare key like alice), and that lane's state"},
		&cli.GenericFlag{Name: "watch", Value: watch, Usage: "refresh every `INTERVAL` (default 2s) with delivered/acked rates, until Ctrl-C (table or json)"},
		&cli.StringSliceFlag{Name: "fail-on", Usage: "exit 6 when `EXPR` holds, e.g. backlog>1000, ack_age>2m, redelivered>0, severity>=warning (repeatable)"},
		outputFlag(inspectFormats...),
	}
	return withUsageErrors(&cli.Command{
		Name:      "inspect",
		Usage:     "per-lane backlog, in-flight messages and health findings",
		UsageText: "lanes inspect --stream NAME [--design NAME | -f FILE] [connection flags] [--key SUBJECT] [--watch [INTERVAL]] [--fail-on EXPR]... [-o table|json|prometheus]",
		Description: `Read every lane of a stream (one paged CONSUMER.LIST pass) and show, lane by
lane: pending, ack pending against max ack pending, redelivered, waiting pulls,
delivered and ack-floor sequences, lag as the age of the oldest
unacknowledged message, time since the last delivery and ack, pinned worker,
the lanes work instance serving it (and since when), pause and cluster
leader; then a summary (with the workers of each design and the messages
they parked) and findings, each with a severity and one line of advice.
Lanes that lanes did not create are found by their filter.

--fail-on grammar: METRIC OP VALUE, OP one of > >= < <= == !=. Lane metrics
(crossed when any lane crosses them): pending, ack_pending, backlog,
redelivered, waiting (counts), lag, ack_age (durations like 90s, 2m).
Stream metrics: total_backlog, unavailable, findings (counts), skew (ratio),
severity (info, warning, critical: any finding). A crossed threshold exits 6;
with --watch, the watch stops at the first crossing.

Examples:
   lanes inspect --stream ORDERS
   lanes inspect -f lanes.yaml --key msgs.received_from.alice
   lanes inspect --stream ORDERS --watch 5s
   lanes inspect --stream ORDERS -o json | jq '.lanes[] | select(.backlog > 0) | .name'
   lanes inspect --stream ORDERS --fail-on 'severity>=critical' --fail-on 'lag>5m'
   lanes inspect --stream ORDERS -o prometheus > lanes.prom.$$ && mv lanes.prom.$$ lanes.prom`,
		Flags: append(flags, connectFlags()...),
		Action: func(c *cli.Context) error {
			o, err := inspectOptions(c, io, watch)
			if err != nil {
				return err
			}
			return runInspect(c.Context, o)
		},
	})
}

// inspectOptions turns flags into options and validates them.
func inspectOptions(c *cli.Context, io *IO, watch *watchValue) (InspectOptions, error) {
	o := InspectOptions{IO: io, Conn: connectOptions(c), Stream: c.String("stream"), Design: c.String("design"), Key: c.String("key"), Watch: watch.every}
	if c.NArg() > 0 {
		return o, usageErrorf("inspect takes no arguments (got %q); name the stream with --stream", c.Args().First())
	}
	if err := notEmpty(c, "stream", "design", "key"); err != nil {
		return o, err
	}
	var err error
	if o.Output, err = outputFormat(c, inspectFormats...); err != nil {
		return o, err
	}
	if o.Watch > 0 && o.Output == "prometheus" {
		// A textfile collector reads one exposition per file; a watch
		// appending one per refresh repeats every series.
		return o, usageErrorf("--watch cannot write -o prometheus: a scrape needs one exposition, not one per refresh; run lanes inspect -o prometheus from cron into a temporary file and rename it over the .prom file (node_exporter's textfile convention)")
	}
	for _, expr := range c.StringSlice("fail-on") {
		t, err := health.ParseThreshold(expr)
		if err != nil {
			return o, usageErrorf("--fail-on %v", err)
		}
		o.FailOn = append(o.FailOn, t)
	}
	// Like the other commands, inspect reads $LANES_FILE or ./lanes.yaml
	// when nothing on the command line names what to inspect.
	o.Stream, o.Plan, err = designStream(c, io, o.Stream, o.Design)
	if err != nil {
		return o, err
	}
	return o, nil
}

// watchValue is --watch: a flag that works alone (--watch) or with a value
// (--watch=5s, or --watch 5s: see optionalValue).
type watchValue struct{ every time.Duration }

// TakesValue: anything shaped like an interval is the watch's, even a bad
// one: --watch 0s must say what is wrong with 0s.
func (w *watchValue) TakesValue(s string) bool { return intervalShape.MatchString(s) }

var intervalShape = regexp.MustCompile(`^-?[0-9][0-9.]*[a-zµ]*$`)

// IsBoolFlag lets --watch stand alone, as Go's flag package allows for booleans.
func (w *watchValue) IsBoolFlag() bool { return true }

func (w *watchValue) String() string {
	if w == nil || w.every == 0 {
		return ""
	}
	return w.every.String()
}

func (w *watchValue) Set(s string) error {
	switch s {
	case "true":
		w.every = DefaultWatchInterval
		return nil
	case "false":
		w.every = 0
		return nil
	}
	d, err := parseInterval(s)
	if err != nil {
		return err
	}
	w.every = d
	return nil
}

// parseInterval reads 5s, 500ms, or a bare number of seconds.
func parseInterval(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.Atoi(s)
		if nerr != nil {
			return 0, fmt.Errorf("%q is not an interval (write 5s, 500ms or 5)", s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 100*time.Millisecond {
		return 0, fmt.Errorf("interval %s is too short: refresh at most every 100ms (--watch 100ms or more)", d)
	}
	return d, nil
}

func runInspect(ctx context.Context, o InspectOptions) error {
	view := newInspectView(o)
	if o.Watch > 0 {
		conn, err := connect.Dial(ctx, o.Conn)
		if err != nil {
			return err
		}
		defer conn.Close()
		return health.Watch(ctx, conn, o.healthOptions(), o.Watch, func(t health.Turn) error {
			if err := view.turn(t); err != nil || t.Report == nil {
				return err
			}
			return thresholds(o, t.Report) // the watch stops at the first crossing
		})
	}
	conn, err := connect.Open(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A one-shot read allocates tens of MB (decoded consumer infos) and
	// exits: collecting garbage on the way costs more than it frees.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	r, err := health.Inspect(ctx, conn, o.healthOptions())
	if err != nil {
		return describeInspectError(conn.Diagnose(ctx, err))
	}
	if err := view.show(r); err != nil {
		return err
	}
	return thresholds(o, r)
}

func (o InspectOptions) healthOptions() health.Options {
	return health.Options{Stream: o.Stream, Design: o.Design, Plan: o.Plan, Key: o.Key}
}

// thresholds checks the --fail-on thresholds.
func thresholds(o InspectOptions, r *health.Report) error {
	if breaches := health.Check(r, o.FailOn); len(breaches) > 0 {
		return &thresholdError{breaches}
	}
	return nil
}

// thresholdError: a --fail-on threshold was crossed (exit 6).
type thresholdError struct{ breaches []health.Breach }

func (e *thresholdError) Error() string {
	lines := make([]string, len(e.breaches))
	for i, b := range e.breaches {
		lines[i] = fmt.Sprintf("--fail-on %s: %s", b.Expr, b.Detail)
	}
	return strings.Join(lines, "\nlanes: ")
}

// inspectView shows reports in the format chosen once with -o: a report
// on its own, and each turn of a watch.
type inspectView interface {
	show(r *health.Report) error
	turn(t health.Turn) error
}

func newInspectView(o InspectOptions) inspectView {
	var write func(w io.Writer, r *health.Report) error
	switch o.Output {
	case "json":
		write = func(w io.Writer, r *health.Report) error { return render.InspectJSON(w, r, r.Places) }
		if o.Watch > 0 {
			write = render.InspectJSONLine // one document per line
		}
	case "prometheus":
		write = render.InspectPrometheus
	default:
		return &screenView{o: o}
	}
	return &streamView{o: o, write: write}
}

// problemText says why a watch turn has no figures.
func problemText(o InspectOptions, err error) string {
	var de *health.DisconnectedError
	if errors.As(err, &de) {
		return de.Error()
	}
	return fmt.Sprintf("cannot read (retrying every %s): %s", o.Watch, planner.Printable(describeInspectError(err).Error(), 500))
}

// describeInspectError names the flag behind an error the user can fix.
func describeInspectError(err error) error {
	var ke *health.KeyError
	if errors.As(err, &ke) {
		return fmt.Errorf("--key: %w", err)
	}
	return err
}

// streamView appends each report to stdout (JSON, Prometheus) and says
// problems on stderr, once each, so stdout stays parseable.
type streamView struct {
	o           InspectOptions
	write       func(w io.Writer, r *health.Report) error
	lastProblem string
}

func (v *streamView) show(r *health.Report) error { return v.write(v.o.IO.Out, r) }

func (v *streamView) turn(t health.Turn) error {
	if t.Err == nil {
		v.lastProblem = ""
		return v.show(t.Report)
	}
	if p := problemText(v.o, t.Err); p != v.lastProblem { // say it once, not every tick
		v.lastProblem = p
		fmt.Fprintf(v.o.IO.Err, "lanes: %s %s\n", t.At.Format("15:04:05"), p)
	}
	return nil
}

// screenView is the table. A watch redraws it in place on a terminal,
// keeping the last figures on screen while it reconnects; elsewhere each
// refresh is appended.
type screenView struct{ o InspectOptions }

func (v *screenView) show(r *health.Report) error { return v.write(v.o.IO.Out, r) }

func (v *screenView) write(w io.Writer, r *health.Report) error {
	s := render.NewStyles(v.o.IO.Out)
	if len(r.Places) > 0 {
		render.KeyPlaces(w, s, r.Places)
	}
	return render.InspectTable(w, s, r)
}

func (v *screenView) turn(t health.Turn) error {
	shown, problem := t.Report, ""
	if t.Err != nil {
		problem = problemText(v.o, t.Err)
		if v.o.IO.OutTTY && t.Last != nil {
			shown = t.Last
			problem += fmt.Sprintf("; figures from %s", t.Last.Time.Format("15:04:05"))
		}
	}
	var frame bytes.Buffer
	render.WatchHeader(&frame, render.NewStyles(v.o.IO.Out), t.At, v.o.Watch, problem)
	if shown != nil {
		if err := v.write(&frame, shown); err != nil {
			return err
		}
	}
	if v.o.IO.OutTTY {
		v.o.IO.Out.Write([]byte("\x1b[H\x1b[2J"))
	} else {
		frame.WriteString("\n")
	}
	_, err := v.o.IO.Out.Write(frame.Bytes())
	return err
}
