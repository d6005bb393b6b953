package commands

import (
	"context"
	"fmt"
	"testing"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
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
		{applyExit(nil, &converge.RefusedError{}), ExitRefused},
		{applyExit(nil, &converge.IncompleteError{}), ExitIncomplete},
		{&converge.FailedError{}, ExitError},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
