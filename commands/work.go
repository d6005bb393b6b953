package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/handlers"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

const catWork = "Work"

// WorkOptions is everything lanes work needs.
type WorkOptions struct {
	IO          *IO
	Conn        connect.Options
	Work        work.Config
	Exec        string
	HTTP        string
	Metrics     string // listen address for Prometheus, "" for none
	StatusEvery time.Duration
	LogFormat   string
	Verbose     bool
}

// errStoppedCleanly ends lanes work after a signal when every message in
// flight finished and the lanes were handed over: exit 0, not 130.
var errStoppedCleanly error = &stoppedCleanly{}

func workCommand(io *IO) *cli.Command {
	flags := append(designFlagList(),
		&cli.StringFlag{Name: "exec", Usage: "run `CMD` with sh -c per message: payload on stdin, LANES_* variables; exit 0 acks, 65 terminates, other codes retry", Category: catWork},
		&cli.StringFlag{Name: "http", Usage: "POST each message to `URL` with Lanes-* headers; 2xx acks, 422 or a Lanes-Term header terminates, anything else retries", Category: catWork},
		&cli.StringFlag{Name: "instance", Usage: "this instance's `NAME` in the membership (default: host name and a random suffix)", Category: catWork},
		&cli.DurationFlag{Name: "lease", Value: work.DefaultLease, Usage: "membership lease `DURATION` (whole seconds, 2s+): a dead instance's lanes move to the others about this long after it died", Category: catWork},
		&cli.DurationFlag{Name: "max-process-time", Usage: "end a handler after `DURATION` (kill the --exec process group, cancel the --http request) and retry the message; 0: no limit", Category: catWork},
		&cli.DurationFlag{Name: "grace", Value: work.DefaultGrace, Usage: "on SIGTERM, SIGHUP or Ctrl-C, how long messages in flight may take to finish before they are handed back (`DURATION`, more than 0)", Category: catWork},
		&cli.StringFlag{Name: "on-poison", Value: string(work.Block), Usage: "`POLICY` for a message that keeps failing: block (retry, the lane waits: strict order), park (republish to --dead-letter after --park-after attempts, then ack) or quarantine (park it and every later message of its key, in order, until lanes parked replay --key lifts it; other keys go on)", Category: catWork},
		&cli.StringFlag{Name: "dead-letter", Usage: "`SUBJECT` parked messages are published to (a stream must store it); messages the handler terminates go there too", Category: catWork},
		&cli.IntFlag{Name: "park-after", Value: work.DefaultParkAfter, Usage: "with --on-poison park or quarantine: attempts `N` before a failing message is parked", Category: catWork},
		&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics on `ADDR` (e.g. :9464) at /metrics, and the probes /healthz (503: restart the process) and /readyz (503: not connected, lease not renewed, or stopping)", Category: catOutput},
		&cli.DurationFlag{Name: "status-every", Value: 30 * time.Second, Usage: "when stderr is not a terminal, log a status line every `DURATION` (0: never); a terminal gets a live status line", Category: catOutput},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log `FORMAT` on stderr: text (logfmt) or json", Category: catOutput},
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log debug events too (pulls, pins, hand-backs)", Category: catOutput},
	)
	flags = append(flags, connectFlags()...)
	return withUsageErrors(&cli.Command{
		Name:      "work",
		Usage:     "process a design's lanes: run a program or call a URL per message, in key order, on many instances",
		UsageText: "lanes work [-f FILE | --stream NAME [--name DESIGN]] (--exec CMD | --http URL) [work flags] [connection flags]",
		Description: `Serve every lane of the design, one message at a time per lane, with a
handler: --exec runs a command per message, --http POSTs it to a URL. Run the
same command on as many hosts as you like: the instances share the lanes
evenly (each holds the floor or the ceiling of lanes/instances), a joining or
stopping instance rebalances at once, and an instance that dies loses its
lanes to the others a --lease later. Lanes are found by their metadata and
followed while running: a repartition (lanes apply --partitions N) needs no
restart.

Per message: in-progress acks while the handler runs (no redelivery however
long it takes), then an ack the server confirms before the lane's next
message. A failure is retried after the lane's backoff (default 1s, 2s, 5s,
10s, 30s); under --on-poison block the lane waits behind it (inspect shows
the stuck head), under park it moves on once the message is safe on the
dead-letter subject. Under quarantine the key is recorded as quarantined in
the membership bucket first, then the message is parked: from then on every
instance parks the key's messages unrun, in order, and every other key goes
on; inspect lists the key, and lanes parked replay --key KEY (once the
handler is fixed) replays them in order and lifts the quarantine. Every
instance honours a quarantine whatever its own policy (one without
--dead-letter holds the key's messages instead).

--exec: the payload on stdin; LANES_STREAM, LANES_LANE, LANES_PARTITION,
LANES_SUBJECT, LANES_KEY, LANES_SEQ (the stream sequence: a version for
conditional writes), LANES_ATTEMPT, LANES_PUBLISHED, LANES_INSTANCE, and
LANES_HEADER_<NAME> per message header. Exit 0 acks, 65 terminates, anything
else retries. The handler's process group dies with lanes work, kill -9
included (unix systems).
--http: the payload as the body; the same values as Lanes-* headers
(Lanes-Header-<Name> per message header). 2xx (its body read whole) acks, 422
or a Lanes-Term header terminates, anything else retries (after Retry-After
if given).
A handler that cannot run at all (exit 126 or 127, an --http service that
cannot be reached, a closed stdout) is an outage, not poison: the message
waits, nothing is parked, and the handler is tried again (up to every 30s).

SIGTERM, SIGHUP (a closed terminal) or Ctrl-C: stop taking messages, let
those in flight finish within --grace, ack them, hand the lanes over at once,
exit 0. A second SIGTERM or Ctrl-C hands back what is in flight (nak) and
exits 130.

Examples:
   lanes work -f lanes.yaml --exec './handle.sh'
   lanes work -f lanes.yaml --http http://127.0.0.1:8080/msg --metrics :9464
   lanes work --stream ORDERS --exec 'psql -c "..."' --max-process-time 2m
   lanes work -f lanes.yaml --exec ./handle.sh --on-poison park --dead-letter dlq.orders --park-after 5
   lanes work -f lanes.yaml --exec ./handle.sh --on-poison quarantine --dead-letter dlq.orders`,
		Flags: flags,
		Action: func(c *cli.Context) error {
			o, err := workOptions(c, io)
			if err != nil {
				return err
			}
			return runWork(c.Context, o)
		},
	})
}

// workOptions turns flags into options and validates them.
func workOptions(c *cli.Context, io *IO) (WorkOptions, error) {
	o := WorkOptions{
		IO:          io,
		Conn:        connectOptions(c),
		Exec:        c.String("exec"),
		HTTP:        c.String("http"),
		Metrics:     c.String("metrics"),
		StatusEvery: c.Duration("status-every"),
		LogFormat:   c.String("log-format"),
		Verbose:     c.Bool("verbose"),
	}
	if c.NArg() > 0 {
		return o, usageErrorf("work takes no arguments (got %s); give the handler with --exec CMD or --http URL", planner.Quote(c.Args().First(), 64))
	}
	switch {
	case o.Exec == "" && o.HTTP == "":
		return o, usageErrorf("give the handler: --exec CMD (a command per message) or --http URL (a POST per message)")
	case o.Exec != "" && o.HTTP != "":
		return o, usageErrorf("--exec and --http both give the handler: choose one")
	case strings.TrimSpace(o.Exec) == "" && o.HTTP == "":
		return o, usageErrorf("--exec %s: the command is empty", planner.Quote(o.Exec, 64))
	}
	if o.HTTP != "" {
		if _, err := handlers.NewHTTP(o.HTTP); err != nil {
			return o, usageErrorf("--http: %v", err)
		}
	}
	if o.Exec != "" {
		if err := handlers.CheckCommand(o.Exec); err != nil {
			return o, usageErrorf("--exec %s: %v", planner.Quote(o.Exec, 64), err)
		}
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return o, usageErrorf("--log-format %s: choose text or json", planner.Quote(o.LogFormat, 64))
	}
	if err := checkListenAddress(o.Metrics); err != nil {
		return o, usageErrorf("--metrics %s: %v: give HOST:PORT or :PORT, e.g. :9464", planner.Quote(o.Metrics, 64), err)
	}
	stream, design, err := workTarget(c, io)
	if err != nil {
		return o, err
	}
	o.Work = work.Config{
		Stream:         stream,
		Design:         design,
		Instance:       c.String("instance"),
		Lease:          c.Duration("lease"),
		Grace:          c.Duration("grace"),
		MaxProcessTime: c.Duration("max-process-time"),
		OnPoison:       work.Policy(c.String("on-poison")),
		DeadLetter:     c.String("dead-letter"),
		ParkAfter:      c.Int("park-after"),
		Timeout:        o.Conn.Timeout,
	}
	// 0 would be no lease and no grace, which the Go API takes for "the
	// default": refused here rather than silently replaced.
	if c.IsSet("lease") && o.Work.Lease == 0 {
		return o, usageErrorf("--lease 0s: must be whole seconds, at least 2s (the default is %s)", work.DefaultLease)
	}
	if o.Work.Grace <= 0 {
		return o, usageErrorf("--grace %s: give the messages in flight some time to finish (e.g. 1s; the default is %s); a second signal hands them back at once", o.Work.Grace, work.DefaultGrace)
	}
	if c.IsSet("instance") && o.Work.Instance == "" {
		return o, usageErrorf("--instance '': give a name (1 to 64 letters, digits, '-' or '_'), or leave the flag out for the host name and a random suffix")
	}
	if n := c.Int("park-after"); n < 1 {
		return o, usageErrorf("--park-after %d: must be at least 1", n)
	}
	if o.StatusEvery < 0 {
		return o, usageErrorf("--status-every %s: cannot be negative", o.StatusEvery)
	}
	if err := o.Work.Validate(); err != nil {
		var ce *work.ConfigError
		if errors.As(err, &ce) {
			return o, usageErrorf("--%s %s: %s", workFlags[ce.Field], ce.Value, ce.Msg)
		}
		return o, usageErrorf("%v", err)
	}
	return o, nil
}

// workFlags names the flag that sets each work.Config field.
var workFlags = map[string]string{"Stream": "stream", "Instance": "instance", "Lease": "lease", "Grace": "grace",
	"MaxProcessTime": "max-process-time", "OnPoison": "on-poison", "DeadLetter": "dead-letter", "ParkAfter": "park-after"}

// workTarget is the stream and design name to serve: from the design
// (file or flags) when it can be planned, else from --stream and --name
// alone (the lanes themselves carry the rest).
func workTarget(c *cli.Context, io *IO) (stream, design string, err error) {
	d, err := readDesign(c)
	if err != nil {
		return "", "", err
	}
	if d.Subject != "" {
		p, err := outlineWithWarnings(d, io)
		if err != nil {
			return "", "", err
		}
		return p.Stream.Name, p.Design.Name, nil
	}
	stream, design = d.Stream.Name, d.Name
	switch {
	case stream == "" && design == "":
		return "", "", usageErrorf("name the design: -f FILE, a lanes.yaml in this directory, LANES_FILE=FILE, or --stream NAME (and --name DESIGN when it is not the stream name in lower case)")
	case design == "":
		design = strings.ToLower(stream)
	case stream == "":
		stream = strings.ToUpper(strings.ReplaceAll(design, "-", "_"))
	}
	return stream, design, nil
}

func runWork(ctx context.Context, o WorkOptions) error {
	if o.Work.Instance == "" {
		o.Work.Instance = work.DefaultInstance()
	}
	status := newWorkStatus(o.IO.Err, o.IO.ErrTTY)
	level := slog.LevelInfo
	if o.Verbose {
		level = slog.LevelDebug
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(status, hopts)
	if o.LogFormat == "json" {
		h = slog.NewJSONHandler(status, hopts)
	}
	o.Work.Logger = slog.New(h)
	// A write to a closed stdout or stderr (lanes work ... 2>&1 | head,
	// once head has exited) must not end lanes work without a hand-over:
	// caught (not ignored, which the handlers would inherit), SIGPIPE
	// turns into a failed write.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)

	var handler work.Handler
	if o.HTTP != "" {
		hh, err := handlers.NewHTTP(o.HTTP)
		if err != nil {
			return usageErrorf("--http: %v", err)
		}
		handler = hh
	} else {
		out := o.IO.Out
		if err := handlers.CheckOutput(out); err != nil {
			return fmt.Errorf("%v: the --exec handlers write there, and each would fail; give lanes work an output (e.g. >> handlers.log, or > /dev/null)", err)
		}
		if o.IO.OutTTY {
			out = status.Wrap(out) // the handlers' output and the status line share the terminal
		}
		handler = &handlers.Exec{Command: o.Exec, Stdout: out, Stderr: status}
	}
	var pr probes
	if o.Metrics != "" {
		o.Work.Metrics = work.NewMetrics()
		stop, err := serveMetrics(o.Metrics, o.Work.Metrics, &pr)
		if err != nil {
			return err
		}
		defer stop()
	}

	o.Conn.Name = "lanes-work-" + o.Work.Instance
	conn, err := connect.Open(ctx, o.Conn)
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err := work.New(conn.JS, o.Work, handler)
	if err != nil {
		return usageErrorf("%v", err)
	}
	pr.w.Store(w)
	// A signal stops the worker as a plain cancellation (a normal stop);
	// a permission violation (on a pull, an ack, the bucket) stops it with
	// that error as the cause, which Run returns, handing its lanes over.
	stopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer context.AfterFunc(ctx, stop)()
	runCtx, release := conn.Guard(stopCtx)
	defer release()
	onSecondSignal(ctx, func() {
		o.Work.Logger.Warn("second signal: handing back the messages in flight (nak) and stopping now")
		w.Abort()
	})
	stopStatus := status.run(w, o.Work.Logger, o.StatusEvery)
	// What the stop did is told from the counters: those at the signal
	// against those at the end.
	atSignal := make(chan work.Stats, 1)
	unwatch := context.AfterFunc(ctx, func() { atSignal <- w.Stats() })
	err = w.Run(runCtx)
	stopStatus()
	if unwatch() || (err != nil && !errors.Is(err, work.ErrGraceExpired) && !errors.Is(err, work.ErrAborted)) {
		return err // not stopped by a signal, or failed
	}
	d := statsSince(<-atSignal, w.Stats())
	text, clean := stopSummary(d, w.LeaveError(), o.Work.Lease)
	if !clean {
		o.Work.Logger.Warn(text)
	} else {
		o.Work.Logger.Info(text)
	}
	if err == nil || d.HandedBack == 0 {
		return errStoppedCleanly // (a message waiting on a handler outage goes back at a normal stop)
	}
	why := "a second signal"
	if errors.Is(err, work.ErrGraceExpired) {
		why = fmt.Sprintf("the --grace period (%s) ended", o.Work.Grace)
	}
	return fmt.Errorf("%s in flight handed back (nak) for redelivery: %s", count(d.HandedBack, "message was", "messages were"), why)
}

// statsSince is what changed between two snapshots of a worker's counters.
func statsSince(a, b work.Stats) work.Stats {
	return work.Stats{Processed: b.Processed - a.Processed, Failed: b.Failed - a.Failed, Parked: b.Parked - a.Parked,
		Terminated: b.Terminated - a.Terminated, HandedBack: b.HandedBack - a.HandedBack, Unconfirmed: b.Unconfirmed - a.Unconfirmed}
}

// stopSummary is lanes work's last line: what became of the messages in
// flight at the signal (d: the counters' changes since) and of the
// membership; clean when all went as planned.
func stopSummary(d work.Stats, leaveErr error, lease time.Duration) (text string, clean bool) {
	var parts []string
	add := func(n uint64, one, many string) {
		if n > 0 {
			parts = append(parts, count(n, one, many))
		}
	}
	add(d.Processed, "message in flight finished and was acked", "messages in flight finished and were acked")
	add(d.Failed, "message in flight failed: it is retried after the lane's backoff", "messages in flight failed: they are retried after the lane's backoff")
	add(d.Parked, "message in flight was parked", "messages in flight were parked")
	add(d.Terminated, "message in flight was terminated by the handler", "messages in flight were terminated by the handler")
	add(d.Unconfirmed, "message in flight finished but the server did not confirm its ack: it runs again", "messages in flight finished but the server did not confirm their acks: they run again")
	add(d.HandedBack, "message in flight was handed back unfinished (nak)", "messages in flight were handed back unfinished (nak)")
	if len(parts) == 0 {
		parts = append(parts, "nothing was in flight")
	}
	if leaveErr == nil {
		parts = append(parts, "lanes handed over")
	} else {
		parts = append(parts, fmt.Sprintf("leaving the membership failed (%v): the other instances take the lanes when this instance's lease expires (%s)", leaveErr, lease))
	}
	clean = d.Failed == 0 && d.Unconfirmed == 0 && d.HandedBack == 0 && leaveErr == nil
	return "stopped: " + strings.Join(parts, "; "), clean
}

// count writes n with the singular or plural words.
func count(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// checkListenAddress checks a --metrics address ("" is none) before
// anything starts: HOST:PORT or :PORT, the port a number or a service
// name.
func checkListenAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %s is not a port", planner.Quote(port, 32))
	}
	return nil
}

// serveMetrics listens at once (a busy port fails the start, not later)
// and serves /metrics, /healthz and /readyz until stop.
func serveMetrics(addr string, m *work.Metrics, p *probes) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", p.healthz)
	mux.HandleFunc("/readyz", p.readyz)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// probes answers /healthz and /readyz for the worker once it exists;
// before, while the connection is opened, the process is alive but not
// ready.
type probes struct{ w atomic.Pointer[work.Worker] }

func (p *probes) healthz(rw http.ResponseWriter, r *http.Request) {
	if w := p.w.Load(); w != nil {
		w.HealthHandler().ServeHTTP(rw, r)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintln(rw, "ok")
}

func (p *probes) readyz(rw http.ResponseWriter, r *http.Request) {
	if w := p.w.Load(); w != nil {
		w.ReadyHandler().ServeHTTP(rw, r)
		return
	}
	http.Error(rw, "not ready: connecting to the server", http.StatusServiceUnavailable)
}
