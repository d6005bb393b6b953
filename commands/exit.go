package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
)

// Exit codes: the one table scripts rely on (also in the README).
const (
	ExitOK          = 0   // success, or nothing to do
	ExitError       = 1   // anything not listed below
	ExitUsage       = 2   // bad flags, bad design, bad input: nothing was changed
	ExitChanges     = 3   // dry run / plan --server: changes are pending
	ExitRefused     = 4   // a change needs an explicit flag (immutable field, undrained prune, no confirmation)
	ExitIncomplete  = 5   // repartition not finished (drain timeout): re-run to continue
	ExitThreshold   = 6   // inspect --fail-on: a threshold was crossed
	ExitConnect     = 10  // cannot reach the server (address, network, TLS)
	ExitAuth        = 11  // authentication failed
	ExitPermission  = 12  // authenticated, but not allowed
	ExitNoJetStream = 13  // JetStream not enabled for the account or domain
	ExitTimeout     = 14  // the server did not answer in time (e.g. leader unavailable)
	ExitInterrupted = 130 // stopped by Ctrl-C or SIGTERM
)

// exitError carries an exit code. A nil err means the command already said
// everything on stdout (e.g. "changes pending") and nothing goes to stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// withCode attaches an exit code to an error.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// silentExit ends the command with a code and no message.
func silentExit(code int) error { return &exitError{code: code} }

// usageErrorf reports bad flags or input (exit 2).
func usageErrorf(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// exitCode maps an error to its documented exit code: the only place that does.
func exitCode(err error) int {
	var ee *exitError
	var ce *connect.Error
	var fe *planner.FieldError
	var le *planner.LineError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case interrupted(err):
		return ExitInterrupted
	case errors.As(err, &ce):
		return connectCode(ce.Kind)
	case errors.As(err, &fe), errors.As(err, &le), errors.As(err, new(*designFileError)), errors.As(err, new(*health.KeyError)):
		return ExitUsage
	case errors.As(err, new(*thresholdError)):
		return ExitThreshold
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

// designFileError is a design file that cannot be read or parsed.
type designFileError struct{ err error }

func (e *designFileError) Error() string { return e.err.Error() }
func (e *designFileError) Unwrap() error { return e.err }
