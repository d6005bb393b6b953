package converge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
)

// StoppedError: apply stopped before the end, because the server went
// away (no answer within --timeout, a lost connection), permission was
// denied, or it was interrupted. What was done stays done; Remaining says
// what a re-run still has to do. It unwraps to the cause, which decides
// the exit code.
type StoppedError struct {
	Err       error
	Remaining []string
}

func (e *StoppedError) Error() string {
	if len(e.Remaining) == 0 {
		return e.Err.Error()
	}
	return e.Err.Error() + "\nnot done (a re-run does it):\n  - " + strings.Join(e.Remaining, "\n  - ")
}

func (e *StoppedError) Unwrap() error { return e.Err }

// errNotStarted marks work a stopped phase never sent.
var errNotStarted = errors.New("not started")

// stopsAll reports whether an error means that no further request can
// succeed: the run is interrupted, the server does not answer or is not
// reachable, permission is denied, or JetStream is unavailable. Apply then
// stops at once instead of waiting one --timeout per remaining request.
func stopsAll(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return true
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Kind != connect.KindOther || errors.Is(ce.Err, context.Canceled)
	}
	return jsapi.IsUnavailable(err)
}

// answered reports whether the server answered the request with an
// error: the request failed for sure. Any other error (a timeout, a
// cancellation) leaves its outcome unknown.
func answered(err error) bool { return jsapi.Answered(err) }

// leftOver describes lanes whose change was not made or not confirmed,
// by action: "create 550 lanes (orders-n600-050, ... and 545 more)".
func leftOver(work []*LaneChange, left []int) []string {
	by := map[Action][]string{}
	for _, i := range left {
		by[work[i].Action] = append(by[work[i].Action], work[i].Name)
	}
	actions := make([]string, 0, len(by))
	for a := range by {
		actions = append(actions, string(a))
	}
	sort.Strings(actions)
	var out []string
	for _, a := range actions {
		names := by[Action(a)]
		sort.Strings(names)
		what := "1 lane"
		if len(names) > 1 {
			what = fmt.Sprintf("%d lanes", len(names))
		}
		out = append(out, fmt.Sprintf("%s %s (%s)", actionVerb(Action(a)), what, shortList(names, 3)))
	}
	return out
}

func actionVerb(a Action) string {
	switch a {
	case ActionDrain:
		return "delete the drained"
	case ActionFinish:
		return "finish the recreate of"
	case ActionUnchanged:
		return "delete the recreate records of"
	}
	return string(a)
}

// streamLeft, lanesLeft, repartitionLeft and pruneLeft say what each step
// of Execute would still do, for a run that stopped before it.
func (x *executor) streamLeft() []string {
	switch x.d.Stream.Action {
	case ActionCreate:
		return []string{"create stream " + x.stream}
	case ActionUpdate:
		fields := make([]string, len(x.d.Stream.Changes))
		for i, c := range x.d.Stream.Changes {
			fields[i] = c.Field
		}
		return []string{fmt.Sprintf("update stream %s (%s)", x.stream, strings.Join(fields, ", "))}
	}
	return nil
}

func (x *executor) lanesLeft() []string {
	work := x.laneWork()
	all := make([]int, len(work))
	for i := range all {
		all[i] = i
	}
	return leftOver(work, all)
}

func (x *executor) repartitionLeft() []string {
	if rp := x.d.Repartition; rp != nil {
		return []string{"the repartition: " + rp.Step}
	}
	return nil
}

func (x *executor) pruneLeft() []string {
	work := x.pruneWork()
	all := make([]int, len(work))
	for i := range all {
		all[i] = i
	}
	return leftOver(work, all)
}
