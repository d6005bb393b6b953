package commands

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim"
)

// TestExitCodesOfApplyErrors: the codes scripts see for apply's outcomes,
// including a Ctrl-C that reached a request (wrapped by connect) or a
// batch of lane requests.
func TestExitCodesOfApplyErrors(t *testing.T) {
	wrapped := &connect.Error{Kind: connect.KindOther, Err: context.Canceled, Msg: "context canceled"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{context.Canceled, ExitInterrupted},
		{wrapped, ExitInterrupted},
		{fmt.Errorf("creating stream: %w", wrapped), ExitInterrupted},
		{&connect.Error{Kind: connect.KindPermission, Err: context.Canceled}, ExitPermission},
		{&connect.Error{Kind: connect.KindTimeout}, ExitTimeout},
		{&converge.RefusedError{}, ExitRefused},
		{&converge.IncompleteError{}, ExitIncomplete},
		{&converge.LockedError{}, ExitRefused},
		{&converge.LockUnsupportedError{}, ExitRefused},
		{&converge.FailedError{}, ExitError},
		{&converge.StoppedError{Err: &connect.Error{Kind: connect.KindTimeout}}, ExitTimeout},
		{fmt.Errorf("x: %w", &connect.Error{Kind: connect.KindUnavailable}), ExitTimeout},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestExitCodeTable: every typed error the commands return, wrapped or
// not, gets its documented code from the one table; nothing else does.
func TestExitCodeTable(t *testing.T) {
	for _, c := range []struct {
		err    error
		want   int
		silent bool
	}{
		{nil, ExitOK, false},
		{errors.New("anything else"), ExitError, false},
		{usageErrorf("--x: bad"), ExitUsage, false},
		{badInput(errors.New("bad spec")), ExitUsage, false},
		{&designFileError{errors.New("lanes.yaml: unreadable")}, ExitUsage, false},
		{&planner.FieldError{}, ExitUsage, false},
		{&planner.LineError{}, ExitUsage, false},
		{&keyfile.Error{Err: errors.New("--keys stdin line 2: bad")}, ExitUsage, false},
		{&sim.InputError{Err: errors.New("--from-stream: no keys")}, ExitUsage, false},
		{fmt.Errorf("--key: %w", &health.KeyError{}), ExitUsage, false},
		{&connect.Error{Kind: connect.KindConfig}, ExitUsage, false},
		{&pendingError{}, ExitChanges, true},
		{&refusedError{errors.New("not confirmed")}, ExitRefused, false},
		{&incompleteError{errors.New("3 lanes could not be read")}, ExitIncomplete, false},
		{&thresholdError{}, ExitThreshold, false},
		{&stoppedCleanly{}, ExitOK, true},
		{&connect.Error{Kind: connect.KindConnect}, ExitConnect, false},
		{&connect.Error{Kind: connect.KindAuth}, ExitAuth, false},
		{&connect.Error{Kind: connect.KindPermission}, ExitPermission, false},
		{&connect.Error{Kind: connect.KindNoJetStream}, ExitNoJetStream, false},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%T %v) = %d, want %d", c.err, c.err, got, c.want)
		}
		if c.err != nil && isSilent(c.err) != c.silent {
			t.Errorf("%T: silent %v, want %v", c.err, isSilent(c.err), c.silent)
		}
	}
}
