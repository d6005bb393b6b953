package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim"
)

// Exit codes: the one table scripts rely on (also in docs/cli.md, and in
// short in the README).
const (
	ExitOK          = 0   // success, or nothing to do
	ExitError       = 1   // anything not listed below
	ExitUsage       = 2   // bad flags, bad design, bad input: nothing was changed
	ExitChanges     = 3   // dry run / plan --server: changes are pending
	ExitRefused     = 4   // a change needs an explicit flag (immutable field, undrained prune, no confirmation)
	ExitIncomplete  = 5   // not finished (drain timeout, account mapping not switched yet, lanes unavailable): re-run to continue
	ExitThreshold   = 6   // inspect --fail-on: a threshold was crossed
	ExitConnect     = 10  // cannot reach the server (address, network, TLS)
	ExitAuth        = 11  // authentication failed
	ExitPermission  = 12  // authenticated, but not allowed
	ExitNoJetStream = 13  // JetStream not enabled for the account or domain
	ExitTimeout     = 14  // the server did not answer in time (e.g. leader unavailable)
	ExitInterrupted = 130 // stopped by Ctrl-C, SIGTERM or SIGHUP
)

// exitCodes maps typed errors to their exit codes: with connectCode and
// interrupted, the only place that decides a code. Commands return these
// errors (theirs, or the packages' own) and never pick a number. The
// first match in the error's chain, top to bottom, wins.
var exitCodes = []struct {
	match func(error) bool
	code  int
}{
	{is[*usageErr], ExitUsage},
	{is[*designFileError], ExitUsage},
	{is[*planner.FieldError], ExitUsage},
	{is[*planner.LineError], ExitUsage},
	{is[*keyfile.Error], ExitUsage},
	{is[*sim.InputError], ExitUsage},
	{is[*health.KeyError], ExitUsage},
	{is[*actions.InputError], ExitUsage},
	{is[*pendingError], ExitChanges},
	{is[*refusedError], ExitRefused},
	{is[*converge.RefusedError], ExitRefused},
	{is[*actions.RefusedError], ExitRefused},
	{is[*converge.LockedError], ExitRefused},
	{is[*converge.LockUnsupportedError], ExitRefused},
	{is[*incompleteError], ExitIncomplete},
	{is[*converge.IncompleteError], ExitIncomplete},
	{is[*thresholdError], ExitThreshold},
	{is[*stoppedCleanly], ExitOK},
}

func is[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// exitCode maps an error to its documented exit code.
func exitCode(err error) int {
	var ce *connect.Error
	switch {
	case err == nil:
		return ExitOK
	case interrupted(err):
		return ExitInterrupted
	}
	for _, e := range exitCodes {
		if e.match(err) {
			return e.code
		}
	}
	if errors.As(err, &ce) {
		return connectCode(ce.Kind)
	}
	return ExitError
}

// interrupted: Ctrl-C, even when a request wrapped the cancellation (a
// permission denial also cancels requests, but keeps its own kind).
func interrupted(err error) bool {
	var ce *connect.Error
	return errors.Is(err, context.Canceled) && (!errors.As(err, &ce) || ce.Kind == connect.KindOther)
}

func connectCode(k connect.Kind) int {
	switch k {
	case connect.KindConfig:
		return ExitUsage
	case connect.KindConnect:
		return ExitConnect
	case connect.KindAuth:
		return ExitAuth
	case connect.KindPermission:
		return ExitPermission
	case connect.KindNoJetStream:
		return ExitNoJetStream
	case connect.KindTimeout, connect.KindUnavailable:
		return ExitTimeout
	}
	return ExitError
}

// usageErr: bad flags, design or input; nothing was changed (exit 2).
type usageErr struct{ err error }

func (e *usageErr) Error() string { return e.err.Error() }
func (e *usageErr) Unwrap() error { return e.err }

// usageErrorf reports bad flags or input.
func usageErrorf(format string, args ...any) error {
	return &usageErr{fmt.Errorf(format, args...)}
}

// badInput makes an error about an input (a flag value a package checked,
// e.g. a workload spec) a usage error.
func badInput(err error) error { return &usageErr{err} }

// designFileError is a design file that cannot be read or parsed (exit 2).
type designFileError struct{ err error }

func (e *designFileError) Error() string { return e.err.Error() }
func (e *designFileError) Unwrap() error { return e.err }

// pendingError: a dry run found changes to make (exit 3). The diff on
// stdout said it all: nothing goes to stderr.
type pendingError struct{}

func (*pendingError) Error() string { return "changes pending" }

// refusedError: apply refuses, in words (not confirmed, no terminal to
// ask on, a dry run's refusals); nothing was changed (exit 4).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// incompleteError: the server could not tell everything (lanes not read);
// a re-run finishes (exit 5).
type incompleteError struct{ err error }

func (e *incompleteError) Error() string { return e.err.Error() }
func (e *incompleteError) Unwrap() error { return e.err }

// stoppedCleanly ends lanes work after a signal when every message in
// flight finished and the lanes were handed over: exit 0, not 130, and
// nothing on stderr.
type stoppedCleanly struct{}

func (*stoppedCleanly) Error() string { return "stopped" }

// isSilent: the error ends the command with its code and no message.
func isSilent(err error) bool { return is[*pendingError](err) || is[*stoppedCleanly](err) }
