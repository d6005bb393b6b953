// Package commands wires flags to options and options to run functions.
// Each command turns flags into an options struct, validates it, and calls
// its run function; exit codes are decided in one place (exit.go).
package commands

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/planner"
)

// Main runs lanes with args (args[0] is the program name) and returns the
// exit code. It never calls os.Exit, so tests run it in-process.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := notifySignals(stderr)
	defer stop()
	return MainContext(ctx, args, stdin, stdout, stderr)
}

// MainContext is Main under the caller's context instead of one cancelled
// by Ctrl-C: tests (and embedders) cancel it to stop a command. However the
// command ends, a cancelled context means exit 130 (interrupted).
func MainContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	io := newIO(stdin, stdout, stderr)
	app := newApp(io)
	app.Metadata = map[string]any{typedArgsKey: args}
	unknown := ""
	app.CommandNotFound = func(_ *cli.Context, name string) { unknown = name }
	err := app.RunContext(ctx, joinOptionalValues(app, args))
	if unknown != "" {
		err = unknownCommand(app, unknown)
	}
	if ctx.Err() != nil && !is[*stoppedCleanly](err) {
		fmt.Fprintf(stderr, "lanes: %s\n", printableLines(strings.TrimSpace(interruptedMessage(ctx, err))))
		return ExitInterrupted
	}
	code := exitCode(err)
	if err != nil && !isSilent(err) {
		fmt.Fprintf(stderr, "lanes: %s\n", printableLines(strings.TrimSpace(err.Error())))
	}
	return code
}

// printableLines escapes what an error quotes from inputs or servers
// (control characters, escape sequences) line by line: no error line can
// drive the terminal.
func printableLines(msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = planner.Printable(l, 4096)
	}
	return strings.Join(lines, "\n")
}

func newApp(io *IO) *cli.App {
	cli.VersionPrinter = func(c *cli.Context) { printVersion(c.App.Writer) }
	return &cli.App{
		Name:    "lanes",
		Usage:   "ordered consumers (keyed lanes) on NATS JetStream",
		Version: currentVersion().version,
		Description: `Per-key order with many workers: each key is mapped to a partition with the
server's partition() subject mapping, and every partition gets its own serial
lane (a durable pull consumer with MaxAckPending=1). Lanes run in parallel;
each key stays in publish order.

   lanes plan      compute the layout, key->lane assignment and definitions
   lanes apply     converge a server to the plan (diff first, safely)
   lanes inspect   per-lane backlog, in-flight and health findings
   lanes simulate  predict throughput and latency, and prove it live
   lanes work      process the lanes: a program or URL per message, many instances
   lanes pause     pause lanes (all, chosen, or a key's); lanes resume resumes them
   lanes rewind    set lanes back to a sequence or a time: messages run again in key order
   lanes skip      settle a lane's stuck head without running it (terminate or park)
   lanes parked    list, show, discard and replay parked messages, in key order
   lanes top       a full-screen view of the lanes: pause, resume, skip and rewind from it

Start with:  lanes simulate --live   (runs on an embedded server, no setup)`,
		Reader:               io.In,
		Writer:               io.Out,
		ErrWriter:            io.Err,
		EnableBashCompletion: false,
		ExitErrHandler:       func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError(err, c.App.Flags, "lanes --help")
		},
		Commands: []*cli.Command{
			planCommand(io),
			applyCommand(io),
			inspectCommand(io),
			simulateCommand(io),
			workCommand(io),
			pauseCommand(io),
			resumeCommand(io),
			skipCommand(io),
			rewindCommand(io),
			parkedCommand(io),
			topCommand(io),
			versionCommand(io),
			completionCommand(io),
			manCommand(io),
			hiddenCompleteCommand(io),
		},
	}
}

// unknownCommand names the commands there are, and the likely one.
func unknownCommand(app *cli.App, name string) error {
	var names []string
	for _, c := range app.Commands {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	hint := ""
	if s := closestName(names, name); s != "" {
		hint = fmt.Sprintf(" (did you mean %s?)", s)
	}
	return usageErrorf("unknown command %q%s: lanes has %s; see lanes --help", name, hint, strings.Join(names, ", "))
}

// withUsageErrors makes a subcommand's flag errors exit 2, like the app's.
func withUsageErrors(cmd *cli.Command) *cli.Command {
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return usageError(err, cmd.Flags, "lanes "+cmd.Name+" --help")
	}
	return cmd
}
