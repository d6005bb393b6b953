package commands

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/planner"
)

// Flag categories shown in --help.
const (
	catDesign  = "Design (override the design file)"
	catConnect = "Connection"
	catOutput  = "Output"
)

// designFlag binds one flag to one design field, so the file and the flags
// share a single list of settings and error messages name the flag.
type designFlag struct {
	flag  cli.Flag
	field string
	set   func(c *cli.Context, name string, d *planner.Design) error
}

func str(name, field, usage, def string, dst func(*planner.Design) *string) designFlag {
	return designFlag{
		flag:  &cli.StringFlag{Name: name, Usage: usage, Category: catDesign, DefaultText: def},
		field: field,
		set: func(c *cli.Context, n string, d *planner.Design) error {
			*dst(d) = c.String(n)
			return nil
		},
	}
}

func integer(name, field, usage, def string, dst func(*planner.Design) *int) designFlag {
	return designFlag{
		flag:  &cli.IntFlag{Name: name, Usage: usage, Category: catDesign, DefaultText: def},
		field: field,
		set: func(c *cli.Context, n string, d *planner.Design) error {
			*dst(d) = c.Int(n)
			return nil
		},
	}
}

// choice is str for a setting with a fixed set of values, which
// completion offers.
func choice(name, field, usage, def string, values []string, dst func(*planner.Design) *string) designFlag {
	f := str(name, field, usage, def, dst)
	f.flag = &choiceFlag{StringFlag: f.flag.(*cli.StringFlag), values: values}
	return f
}

func duration(name, field, usage, def string, dst func(*planner.Design) *planner.Duration) designFlag {
	return designFlag{
		flag:  &cli.DurationFlag{Name: name, Usage: usage, Category: catDesign, DefaultText: def},
		field: field,
		set: func(c *cli.Context, n string, d *planner.Design) error {
			*dst(d) = planner.Duration(c.Duration(n))
			return nil
		},
	}
}

// designFlags are accepted by plan, apply and simulate.
var designFlags = []designFlag{
	str("name", "name", "design `NAME` (lane names start with it)", "the stream name in lower case, else the subject's literal prefix: msgs.received_from.* -> msgs-received_from", func(d *planner.Design) *string { return &d.Name }),
	str("stream", "stream.name", "stream `NAME`", "the design name in upper case, '-' as '_'", func(d *planner.Design) *string { return &d.Stream.Name }),
	str("subject", "subject", "publish subject `PATTERN`, e.g. msgs.received_from.*", "", func(d *planner.Design) *string { return &d.Subject }),
	{
		flag:  &cli.StringFlag{Name: "key-tokens", Usage: "which '*' tokens form the ordering key, 1-based `LIST` like partition(n,i...) (default: all)", Category: catDesign},
		field: "key_tokens",
		set: func(c *cli.Context, n string, d *planner.Design) error {
			v, err := parseIntList(c.String(n))
			if err != nil {
				return usageErrorf("--key-tokens %q: %v", c.String(n), err)
			}
			d.KeyTokens = v
			return nil
		},
	},
	integer("partitions", "partitions", "`N` partitions, one serial lane each", "8", func(d *planner.Design) *int { return &d.Partitions }),
	choice("mapping", "mapping", "`MODE`: where the mapping lives: stream (a subject transform lanes applies) or account (the operator installs it)", "stream",
		[]string{planner.MappingStream, planner.MappingAccount}, func(d *planner.Design) *string { return &d.Mapping }),
	str("prefix", "prefix", "literal `PREFIX` of the partitioned subjects", "the subject's literal prefix", func(d *planner.Design) *string { return &d.Prefix }),
	{
		flag:  &cli.StringFlag{Name: "destination", Usage: "adopt an existing mapping `DESTINATION` instead of the derived one", Category: catDesign},
		field: "destination",
		set: func(c *cli.Context, n string, d *planner.Design) error {
			d.Destination = planner.Destination(c.String(n))
			return nil
		},
	},
	str("account", "account", "account `NAME` for the conf and nsc mapping outputs", "", func(d *planner.Design) *string { return &d.Account }),
	choice("storage", "stream.storage", "stream `STORAGE` if created: file or memory", "file",
		[]string{"file", "memory"}, func(d *planner.Design) *string { return &d.Stream.Storage }),
	integer("replicas", "stream.replicas", "stream replicas `N` if created (1-5)", "1", func(d *planner.Design) *int { return &d.Stream.Replicas }),
	choice("retention", "stream.retention", "stream `RETENTION` if created: limits, workqueue or interest", "limits",
		[]string{"limits", "workqueue", "interest"}, func(d *planner.Design) *string { return &d.Stream.Retention }),
	integer("max-consumers", "stream.max_consumers", "stream max_consumers `N`; apply only ever raises it", "max(1000, 2 x partitions)", func(d *planner.Design) *int { return &d.Stream.MaxConsumers }),
	duration("ack-wait", "lane.ack_wait", "lane ack wait `DURATION`; must exceed processing time (or use in-progress acks)", "30s", func(d *planner.Design) *planner.Duration { return &d.Lane.AckWait }),
	integer("max-deliver", "lane.max_deliver", "lane max deliveries `N`; -1 is unlimited (a poison message then blocks its lane: inspect flags it)", "-1", func(d *planner.Design) *int { return &d.Lane.MaxDeliver }),
	{
		flag:  &cli.StringFlag{Name: "backoff", Usage: "lane redelivery backoff `LIST`, e.g. 1s,5s,30s (first step is the ack wait)", Category: catDesign},
		field: "lane.backoff",
		set: func(c *cli.Context, n string, d *planner.Design) error {
			d.Lane.BackOff = nil
			for _, s := range splitList(c.String(n)) {
				v, err := time.ParseDuration(s)
				if err != nil {
					return usageErrorf("--backoff: %q is not a duration (write 1s,5s,30s)", s)
				}
				d.Lane.BackOff = append(d.Lane.BackOff, planner.Duration(v))
			}
			return nil
		},
	},
	integer("max-ack-pending", "lane.max_ack_pending", "`N` messages out at once per lane; only 1 keeps per-key order", "1", func(d *planner.Design) *int { return &d.Lane.MaxAckPending }),
	integer("keys-in-flight", "lane.keys_in_flight", "`K` keys of a lane processed at once, one message per key (above 1: a key-parallel lane, server 2.11+)", "1", func(d *planner.Design) *int { return &d.Lane.KeysInFlight }),
	integer("max-waiting", "lane.max_waiting", "`N` queued pull requests per lane", "512", func(d *planner.Design) *int { return &d.Lane.MaxWaiting }),
	{
		flag:  &cli.BoolFlag{Name: "pinned", Usage: "pin one worker per lane (priority group, server 2.11+) with failover", Category: catDesign, DefaultText: "false"},
		field: "lane.pinned",
		set: func(c *cli.Context, n string, d *planner.Design) error {
			d.Lane.Pinned = c.Bool(n)
			return nil
		},
	},
	duration("pinned-ttl", "lane.pinned_ttl", "`DURATION` without pulls before the pin moves to another worker", "2m", func(d *planner.Design) *planner.Duration { return &d.Lane.PinnedTTL }),
	integer("lane-replicas", "lane.replicas", "lane consumer replicas `N`; 0 follows the stream", "0", func(d *planner.Design) *int { return &d.Lane.Replicas }),
}

// inspectFileFlag is inspect's -f: a design is optional there (--stream
// alone inspects every lane), so it is found only when nothing else says
// what to inspect.
var inspectFileFlag = &cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "design `FILE` (YAML or JSON)", Category: catDesign,
	DefaultText: "with no -f, --stream or --design, $" + designFileEnv + ", else ./" + defaultDesignFile + " if there is one"}

// designFileFlag is -f on the commands that find the design themselves
// when neither -f nor --subject is given (see discoverDesign).
var designFileFlag = &cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "design `FILE` (YAML or JSON; - reads stdin)", Category: catDesign,
	DefaultText: "with no -f and no --subject, $" + designFileEnv + ", else ./" + defaultDesignFile + " if there is one"}

const (
	designFileEnv     = "LANES_FILE"
	defaultDesignFile = "lanes.yaml"
	fromEnv           = "from " + designFileEnv // how discoverDesign found it
)

// errNoDesign: nothing says what to plan.
var errNoDesign = usageErrorf("no design given: use -f FILE, --subject PATTERN, a %s in this directory, or %s=FILE", defaultDesignFile, designFileEnv)

func designFlagList() []cli.Flag {
	out := []cli.Flag{designFileFlag}
	for _, f := range designFlags {
		out = append(out, f.flag)
	}
	return out
}

// readDesign loads the design file (-f, or the one discoverDesign finds)
// and applies the flags that were set on top, recording where each
// setting came from. The file may be stdin (-), a pipe or a FIFO: it is
// read once, and the read gives up on Ctrl-C.
func readDesign(c *cli.Context) (planner.Design, error) {
	d, _, err := readDesignFrom(c)
	return d, err
}

// readDesignFrom is readDesign that also says which file it read ("" for none).
func readDesignFrom(c *cli.Context) (planner.Design, string, error) {
	var d planner.Design
	if err := notEmpty(c, "file"); err != nil {
		return d, "", err
	}
	path, found := c.String("file"), ""
	if path == "" && !c.IsSet("subject") {
		path, found = discoverDesign()
	}
	if found == fromEnv && path == input.Stdin {
		// stdin is the command line's to give (-f -), and --keys - may want it
		return d, "", &designFileError{fmt.Errorf("%s=-: name a file; to read the design from stdin use -f -", designFileEnv)}
	}
	if path != "" {
		data, name, err := readDesignFile(c.Context, path, c.App.Reader)
		if err != nil {
			if found == fromEnv {
				err = &designFileError{fmt.Errorf("%s=%s: %w", designFileEnv, path, err)}
			}
			return d, "", err
		}
		if found != "" {
			fmt.Fprintf(c.App.ErrWriter, "using design file %s (%s)\n", planner.Printable(path, 256), found)
		}
		d, err = planner.ParseDesign(data, name)
		if err != nil {
			return d, "", &designFileError{err}
		}
	}
	for _, f := range designFlags {
		name := f.flag.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		if err := f.set(c, name, &d); err != nil {
			return d, "", err
		}
		d.SetOrigin(f.field, "--"+name)
	}
	return d, path, nil
}

// discoverDesign is the design file to read when the command line gives
// neither -f nor --subject: $LANES_FILE (which must then be readable),
// else ./lanes.yaml when it exists; found says how, for the stderr line
// ("" for none).
func discoverDesign() (path, found string) {
	if env := os.Getenv(designFileEnv); env != "" {
		return env, fromEnv
	}
	if st, err := os.Stat(defaultDesignFile); err == nil && !st.IsDir() {
		return "./" + defaultDesignFile, "no -f given"
	}
	return "", ""
}

func readDesignFile(ctx context.Context, path string, stdin io.Reader) ([]byte, string, error) {
	src, err := input.Open(ctx, path, stdin)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", err
		}
		return nil, "", &designFileError{fmt.Errorf("cannot read design file %v", err)}
	}
	defer src.Close()
	data, err := src.ReadAll(ctx, planner.MaxDesignFile)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", err
		}
		return nil, "", &designFileError{fmt.Errorf("cannot read design file %v", err)}
	}
	return data, src.Name(), nil
}

// notEmpty refuses a flag given with an empty value: --key ” is a
// mistake (an unset variable in a script), not a request for the default.
func notEmpty(c *cli.Context, names ...string) error {
	for _, n := range names {
		if c.IsSet(n) && strings.TrimSpace(c.String(n)) == "" {
			return usageErrorf("--%s is empty: give a value, or leave the flag out", n)
		}
	}
	return nil
}

// positive is a flag action refusing a zero or negative duration.
func positive(name string) func(*cli.Context, time.Duration) error {
	return func(_ *cli.Context, d time.Duration) error {
		if d <= 0 {
			return usageErrorf("--%s %s: must be a positive duration, like 5s", name, d)
		}
		return nil
	}
}

// loadPlan reads the design and plans it; warnings go to stderr. With no
// design file and no subject, it says every way to give a design.
func loadPlan(c *cli.Context, io *IO) (*planner.Plan, error) {
	d, file, err := readDesignFrom(c)
	if err != nil {
		return nil, err
	}
	if file == "" && d.Subject == "" {
		return nil, errNoDesign
	}
	return planWithWarnings(d, io)
}

// planWithWarnings plans a design; warnings go to stderr.
func planWithWarnings(d planner.Design, io *IO) (*planner.Plan, error) {
	p, err := planner.New(d)
	return withWarnings(p, err, io)
}

// outlineWithWarnings is planWithWarnings without the lanes
// (planner.Outline).
func outlineWithWarnings(d planner.Design, io *IO) (*planner.Plan, error) {
	p, err := planner.Outline(d)
	return withWarnings(p, err, io)
}

// withWarnings prints a plan's warnings on stderr.
func withWarnings(p *planner.Plan, err error, io *IO) (*planner.Plan, error) {
	if err != nil {
		return nil, err
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(io.Err, "warning: %s\n", w)
	}
	return p, nil
}

func parseIntList(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// connectFlags are declared on every server-facing command, so they work
// after the subcommand name (lanes apply --server URL).
func connectFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Aliases: []string{"s"}, EnvVars: []string{"NATS_URL"}, Usage: "NATS server `URL`s, comma separated", Category: catConnect},
		&cli.StringFlag{Name: "context", EnvVars: []string{"NATS_CONTEXT"}, Usage: "natscli context `NAME` (flags override it)", Category: catConnect},
		&cli.StringFlag{Name: "creds", EnvVars: []string{"NATS_CREDS"}, Usage: "user credentials `FILE`", Category: catConnect},
		&cli.StringFlag{Name: "nkey", EnvVars: []string{"NATS_NKEY"}, Usage: "user nkey seed `FILE`", Category: catConnect},
		&cli.StringFlag{Name: "user", EnvVars: []string{"NATS_USER"}, Usage: "user `NAME`", Category: catConnect},
		&cli.StringFlag{Name: "password", EnvVars: []string{"NATS_PASSWORD"}, Usage: "`PASSWORD` (prefer NATS_PASSWORD or a context: flags show in process lists)", Category: catConnect},
		&cli.StringFlag{Name: "token", EnvVars: []string{"NATS_TOKEN"}, Usage: "auth `TOKEN`", Category: catConnect},
		&cli.StringFlag{Name: "tlscert", EnvVars: []string{"NATS_CERT"}, Usage: "TLS client certificate `FILE`", Category: catConnect},
		&cli.StringFlag{Name: "tlskey", EnvVars: []string{"NATS_KEY"}, Usage: "TLS client key `FILE`", Category: catConnect},
		&cli.StringFlag{Name: "tlsca", EnvVars: []string{"NATS_CA"}, Usage: "TLS CA `FILE` to verify the server", Category: catConnect},
		&cli.BoolFlag{Name: "tlsfirst", Usage: "TLS handshake before the NATS INFO (server tls handshake_first)", Category: catConnect},
		&cli.StringFlag{Name: "js-domain", Usage: "JetStream `DOMAIN`", Category: catConnect},
		&cli.DurationFlag{Name: "timeout", Value: connect.DefaultTimeout, Usage: "`DURATION` allowed for each request to the server (inspect: for the whole read)", Category: catConnect, Action: positive("timeout")},
	}
}

// withoutServerEnv drops NATS_URL and NATS_CONTEXT from --server and
// --context, for commands that only connect when asked on the command line.
func withoutServerEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && (sf.Name == "server" || sf.Name == "context") {
			sf.EnvVars = nil
		}
	}
	return flags
}

// connectOptions reads the connection flags.
func connectOptions(c *cli.Context) connect.Options {
	return connect.Options{
		Server:     c.String("server"),
		Context:    c.String("context"),
		Creds:      c.String("creds"),
		NKey:       c.String("nkey"),
		User:       c.String("user"),
		Password:   c.String("password"),
		Token:      c.String("token"),
		TLSCert:    c.String("tlscert"),
		TLSKey:     c.String("tlskey"),
		TLSCA:      c.String("tlsca"),
		TLSFirst:   c.Bool("tlsfirst"),
		JSDomain:   c.String("js-domain"),
		Timeout:    c.Duration("timeout"),
		ConfigHome: os.Getenv("XDG_CONFIG_HOME"),
	}
}

// outputFlag declares -o with the formats a command supports; the first is the default.
func outputFlag(formats ...string) cli.Flag {
	return &choiceFlag{StringFlag: &cli.StringFlag{
		Name:     "output",
		Aliases:  []string{"o"},
		Value:    formats[0],
		Usage:    "output `FORMAT`: " + strings.Join(formats, ", "),
		Category: catOutput,
	}, values: formats}
}

// choiceFlag is a string flag with a fixed set of values (or, for a
// list, of items): completion offers them. It is a cli.StringFlag to
// everything else.
type choiceFlag struct {
	*cli.StringFlag
	values []string
}

// flagChoices are the fixed values of the command's flag name, if any.
func flagChoices(cmd *cli.Command, name string) []string {
	for _, f := range cmd.Flags {
		if cf, ok := f.(*choiceFlag); ok && slices.Contains(cf.Names(), name) {
			return cf.values
		}
	}
	return nil
}

// outputFormat reads -o and checks it is one of the command's formats.
func outputFormat(c *cli.Context, formats ...string) (string, error) {
	f := strings.ToLower(c.String("output"))
	for _, ok := range formats {
		if f == ok {
			return f, nil
		}
	}
	return "", usageErrorf("--output %q: choose one of %s", c.String("output"), strings.Join(formats, ", "))
}

// optionalValue is a flag value that may stand alone (--watch) or take a
// value (--watch=5s). Go's flag parsing gives a flag that may stand alone
// no separate value: it would take "--watch 5s" as the flag, then 5s and
// every flag after it as arguments. A command declares such a flag as a
// cli.GenericFlag whose value implements optionalValue, and
// joinOptionalValues joins its separate value for it.
type optionalValue interface {
	IsBoolFlag() bool
	TakesValue(arg string) bool // whether arg is this flag's value, not the next argument
}

// joinOptionalValues turns "CMD ... --flag VALUE" into "--flag=VALUE" for
// the optional-value flags of the command named in args, when VALUE is
// shaped like the flag's value. Other commands' arguments pass unchanged.
func joinOptionalValues(app *cli.App, args []string) []string {
	out := make([]string, 0, len(args))
	var cmd *cli.Command
	named := false // the command name was seen
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(out, args[i:]...)
		case i > 0 && !named && !strings.HasPrefix(a, "-"):
			named, cmd = true, app.Command(a)
		case cmd != nil && i+1 < len(args):
			if v := optionalFlag(cmd, a); v != nil && v.TakesValue(args[i+1]) {
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// optionalFlag is the optional value behind arg (-name or --name), if the
// command declares such a flag.
func optionalFlag(cmd *cli.Command, arg string) optionalValue {
	name := strings.TrimLeft(arg, "-")
	if name == arg || strings.Contains(name, "=") {
		return nil
	}
	for _, f := range cmd.Flags {
		g, ok := f.(*cli.GenericFlag)
		if !ok {
			continue
		}
		if v, ok := g.Value.(optionalValue); ok && slices.Contains(g.Names(), name) {
			return v
		}
	}
	return nil
}

// designStream finds what inspect, top and the actions act on: the stream
// named by --stream, or the stream of the design file (-f FILE, else
// $LANES_FILE or ./lanes.yaml when neither --stream nor --design names
// anything); plan is that file's plan (nil without one). design is
// --design, which a design file must not contradict.
func designStream(c *cli.Context, io *IO, stream, design string) (string, *planner.Plan, error) {
	discovered := false
	if c.String("file") == "" && stream == "" && design == "" {
		path, _ := discoverDesign()
		discovered = path != ""
	}
	var plan *planner.Plan
	if c.String("file") != "" || discovered {
		if design != "" {
			return "", nil, usageErrorf("--design and -f both name the design: give one")
		}
		var err error
		if plan, err = loadPlan(c, io); err != nil {
			return "", nil, err
		}
		if stream == "" {
			stream = plan.Stream.Name
		}
	}
	if stream == "" {
		return "", nil, usageErrorf("--stream is required (or -f FILE naming the design's stream, a lanes.yaml in this directory, or LANES_FILE=FILE)")
	}
	if err := planner.CheckStreamName(stream); err != nil {
		return "", nil, usageErrorf("--stream %s: %v", planner.Quote(stream, 80), err)
	}
	return stream, plan, nil
}
