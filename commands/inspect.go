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

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

var inspectFormats = []string{"table", "json", "prometheus"}

// DefaultWatchInterval is the refresh of --watch without a value.
const DefaultWatchInterval = 2 * time.Second

// placementEvery is how often a watch reads the stream's subject list.
const placementEvery = time.Minute

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
		fileFlag,
		&cli.StringFlag{Name: "key", Usage: "which lane holds `SUBJECT` (as published), and that lane's state"},
		&cli.GenericFlag{Name: "watch", Value: watch, Usage: "refresh every `INTERVAL` (default 2s) with delivered/acked rates, until Ctrl-C"},
		&cli.StringSliceFlag{Name: "fail-on", Usage: "exit 6 when `EXPR` holds, e.g. backlog>1000, ack_age>2m, redelivered>0, severity>=warning (repeatable)"},
		outputFlag(inspectFormats...),
	}
	return withUsageErrors(&cli.Command{
		Name:      "inspect",
		Usage:     "per-lane backlog, in-flight messages and health findings",
		UsageText: "lanes inspect --stream NAME [--design NAME | -f FILE] [connection flags] [--key SUBJECT] [--watch [INTERVAL]] [--fail-on EXPR]... [-o table|json|prometheus]",
		Description: `Read every lane of a stream (one paged CONSUMER.LIST pass) and show, lane by
lane: pending, ack pending against max ack pending, redelivered, waiting pulls,
delivered and ack-floor sequences, lag in messages and as the age of the
oldest unacknowledged message, time since the last delivery and ack, pinned
worker, pause and cluster leader; then a summary and findings, each with a
severity and one line of advice. Lanes that lanes did not create are found by
their filter.

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
   lanes inspect --stream ORDERS -o prometheus > /var/lib/node_exporter/lanes.prom`,
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
	for _, expr := range c.StringSlice("fail-on") {
		t, err := health.ParseThreshold(expr)
		if err != nil {
			return o, usageErrorf("--fail-on %v", err)
		}
		o.FailOn = append(o.FailOn, t)
	}
	if c.String("file") != "" {
		if o.Design != "" {
			return o, usageErrorf("--design and -f both name the design: give one")
		}
		if o.Plan, err = loadPlan(c, io); err != nil {
			return o, err
		}
		if o.Stream == "" {
			o.Stream = o.Plan.Stream.Name
		}
	}
	if o.Stream == "" {
		return o, usageErrorf("--stream is required (or -f FILE naming the design's stream)")
	}
	if err := planner.CheckStreamName(o.Stream); err != nil {
		return o, usageErrorf("--stream %s: %v", planner.Quote(o.Stream, 80), err)
	}
	return o, nil
}

// watchValue is --watch: a flag that works alone (--watch) or with a value
// (--watch=5s; --watch 5s is rewritten to that by joinWatchInterval).
type watchValue struct{ every time.Duration }

// joinWatchInterval turns "inspect ... --watch 5s" into "--watch=5s": Go's
// flag parsing gives a flag that may stand alone no separate value, and
// would take 5s (and every flag after it) as arguments.
func joinWatchInterval(args []string) []string {
	inInspect := false
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case a == "inspect":
			inInspect = true
		case inInspect && (a == "--watch" || a == "-watch") && i+1 < len(args):
			// Anything shaped like an interval is the watch's, even a bad
			// one: --watch 0s must say what is wrong with 0s.
			if intervalShape.MatchString(args[i+1]) {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

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
	if o.Watch > 0 {
		return runWatch(ctx, o)
	}
	conn, err := connect.Open(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A one-shot read allocates tens of MB (decoded consumer infos) and
	// exits: collecting garbage on the way costs more than it frees.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	r, places, err := readInspect(ctx, conn, o, o.healthOptions())
	if err != nil {
		return conn.Diagnose(ctx, err)
	}
	if err := writeInspect(o, o.IO.Out, r, places); err != nil {
		return err
	}
	return failOn(o, r)
}

func (o InspectOptions) healthOptions() health.Options {
	return health.Options{Stream: o.Stream, Design: o.Design, Plan: o.Plan}
}

// readInspect reads one report; with --key it keeps only the key's lanes.
func readInspect(ctx context.Context, conn *connect.Conn, o InspectOptions, ho health.Options) (*health.Report, []health.KeyPlace, error) {
	r, err := health.Inspect(ctx, conn, ho)
	if err != nil {
		return nil, nil, err
	}
	if o.Key == "" {
		return r, nil, nil
	}
	places, err := r.Locate(o.Key)
	if err != nil {
		return nil, nil, usageErrorf("--key: %v", err)
	}
	var names []string
	for _, p := range places {
		names = append(names, p.Lanes...)
	}
	return r.Only(names...), places, nil
}

func writeInspect(o InspectOptions, w io.Writer, r *health.Report, places []health.KeyPlace) error {
	switch o.Output {
	case "json":
		if o.Watch > 0 {
			return render.InspectJSONLine(w, r)
		}
		return render.InspectJSON(w, r, places)
	case "prometheus":
		return render.InspectPrometheus(w, r)
	}
	s := render.NewStyles(o.IO.Out)
	if len(places) > 0 {
		render.KeyPlaces(w, s, places)
	}
	return render.InspectTable(w, s, r)
}

// failOn checks the --fail-on thresholds: crossing one is exit 6.
func failOn(o InspectOptions, r *health.Report) error {
	breaches := health.Check(r, o.FailOn)
	if len(breaches) == 0 {
		return nil
	}
	lines := make([]string, len(breaches))
	for i, b := range breaches {
		lines[i] = fmt.Sprintf("--fail-on %s: %s", b.Expr, b.Detail)
	}
	return withCode(ExitThreshold, errors.New(strings.Join(lines, "\nlanes: ")))
}

// runWatch connects and watches. JetStream that does not answer yet (a
// cluster without a leader, a timeout) is a problem the watch shows and
// retries; a wrong setting, credentials or permissions end it.
func runWatch(ctx context.Context, o InspectOptions) error {
	conn, err := connect.Dial(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.CheckJetStream(ctx); err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) || (ce.Kind != connect.KindTimeout && ce.Kind != connect.KindUnavailable) {
			return err
		}
	}
	return watchInspect(ctx, conn, o)
}

// watchInspect refreshes the report every interval until ctx ends. While
// the connection is down it says so and waits for nats.go to reconnect,
// rather than exiting; a read that fails is retried on the next tick.
func watchInspect(ctx context.Context, conn *connect.Conn, o InspectOptions) error {
	tick := time.NewTicker(o.Watch)
	defer tick.Stop()
	var prev, placed *health.Report
	lastProblem := ""
	for {
		// The subject list (placement check) is read once a minute; the
		// refreshes in between carry its findings.
		ho := o.healthOptions()
		checkPlacement := placed == nil || time.Since(placed.Time) >= placementEvery
		if !checkPlacement {
			ho.MaxSubjects = -1
		}
		r, places, problem := watchRead(ctx, conn, o, ho)
		if ctx.Err() != nil {
			return nil // Ctrl-C is how a watch ends
		}
		if r != nil {
			if checkPlacement {
				placed = r
			} else {
				health.CarryPlacement(placed, r)
			}
			health.Rates(prev, r)
			prev = r
		}
		if err := drawWatch(o, r, prev, places, problem, problem == lastProblem); err != nil {
			return err
		}
		lastProblem = problem
		if r != nil {
			if err := failOn(o, r); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchRead reads once, failing fast: no request while disconnected, and
// the whole read bounded by the interval (or the request timeout).
func watchRead(ctx context.Context, conn *connect.Conn, o InspectOptions, ho health.Options) (*health.Report, []health.KeyPlace, string) {
	if st := conn.NC.Status(); st != nats.CONNECTED {
		return nil, nil, fmt.Sprintf("lost the connection to %s; reconnecting (%s)", conn.Server, strings.ToLower(st.String()))
	}
	rctx, cancel := context.WithTimeout(ctx, max(o.Watch, conn.Timeout))
	defer cancel()
	r, places, err := readInspect(rctx, conn, o, ho)
	if err != nil {
		err = conn.Diagnose(ctx, err)
		return nil, nil, fmt.Sprintf("cannot read (retrying every %s): %s", o.Watch, planner.Printable(err.Error(), 500))
	}
	return r, places, ""
}

// drawWatch shows one refresh. On a terminal with the table output the
// screen is redrawn in place; otherwise each refresh is appended (JSON:
// one document per line), and problems go to stderr, once each, for JSON
// and Prometheus so stdout stays parseable.
func drawWatch(o InspectOptions, r, last *health.Report, places []health.KeyPlace, problem string, repeated bool) error {
	if o.Output != "table" {
		if problem != "" {
			if !repeated { // say it once, not every tick
				fmt.Fprintf(o.IO.Err, "lanes: %s %s\n", time.Now().Format("15:04:05"), problem)
			}
			return nil
		}
		return writeInspect(o, o.IO.Out, r, places)
	}
	shown := r
	if shown == nil && o.IO.OutTTY && last != nil {
		shown = last // keep the last figures on screen while reconnecting
		problem += fmt.Sprintf("; figures from %s", last.Time.Format("15:04:05"))
	}
	var frame bytes.Buffer
	s := render.NewStyles(o.IO.Out)
	render.WatchHeader(&frame, s, time.Now(), o.Watch, problem)
	if shown != nil {
		if err := writeInspect(o, &frame, shown, places); err != nil {
			return err
		}
	}
	if o.IO.OutTTY {
		o.IO.Out.Write([]byte("\x1b[H\x1b[2J"))
	} else {
		frame.WriteString("\n")
	}
	_, err := o.IO.Out.Write(frame.Bytes())
	return err
}
