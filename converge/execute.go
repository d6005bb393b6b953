package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// Result is what Execute did.
type Result struct {
	StreamCreated   bool         `json:"stream_created"`
	StreamUpdated   bool         `json:"stream_updated"`
	MappingSwitched bool         `json:"mapping_switched"`
	Created         int          `json:"created"`
	Updated         int          `json:"updated"`
	Held            int          `json:"held"`
	Resumed         int          `json:"resumed"`
	Recreated       []Recreated  `json:"recreated,omitempty"`
	Deleted         int          `json:"deleted"`
	Drain           *DrainReport `json:"drain,omitempty"`
	Failures        []Failure    `json:"failures,omitempty"`
	// Incomplete says why the server is not yet as designed and what a
	// re-run needs; empty when apply finished.
	Incomplete []string `json:"incomplete,omitempty"`
	// Remaining is what was left undone when apply stopped early (the
	// server went away, an interruption): a re-run does it.
	Remaining []string `json:"remaining,omitempty"`
	// Warnings are things done that deserve a look.
	Warnings      []string `json:"warnings,omitempty"`
	WriteRequests int64    `json:"write_requests"`
	// RefusedWrites are the write requests the server answered with an
	// error: they changed nothing.
	RefusedWrites int64         `json:"refused_write_requests,omitempty"`
	Elapsed       time.Duration `json:"elapsed_ns"`
}

// Recreated is a lane recreated at its position.
type Recreated struct {
	Lane     string   `json:"lane"`
	Position Position `json:"position"`
}

// Failure is one lane request the server refused or did not answer.
type Failure struct {
	Lane   string `json:"lane"`
	Action Action `json:"action"`
	Error  string `json:"error"`
}

// DrainReport is how the wait for a repartition's old lanes went.
type DrainReport struct {
	Lanes     int           `json:"lanes"`
	Initial   int64         `json:"initial_backlog"`
	Remaining int64         `json:"remaining_backlog"`
	Waited    time.Duration `json:"waited_ns"`
	Drained   bool          `json:"drained"`
}

// RefusedError: the diff needs a flag (or a confirmation) that was not
// given. Nothing was changed.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string {
	return "nothing was changed:\n  - " + strings.Join(e.Reasons, "\n  - ")
}

// IncompleteError: apply did what it could; a re-run continues.
type IncompleteError struct{ Reasons []string }

func (e *IncompleteError) Error() string {
	return "not finished, re-run apply to continue:\n  - " + strings.Join(e.Reasons, "\n  - ")
}

// FailedError: some lane requests failed; the others were made.
type FailedError struct {
	Failures []Failure
	errs     []error
}

func (e *FailedError) Error() string {
	const shown = 10
	var b strings.Builder
	fmt.Fprintf(&b, "%d lane changes failed (a re-run retries them):", len(e.Failures))
	for i, f := range e.Failures {
		if i == shown {
			fmt.Fprintf(&b, "\n  ... and %d more", len(e.Failures)-shown)
			break
		}
		fmt.Fprintf(&b, "\n  %s (%s): %s", f.Lane, f.Action, f.Error)
	}
	return b.String()
}

// Unwrap exposes the causes, so a permission, timeout or interruption
// among them decides the exit code.
func (e *FailedError) Unwrap() []error { return e.errs }

// Apply compares and executes: the whole of apply with no lock, no prompt
// and no output, for Go programs (docs/apply.md, "From Go") and tests.
// lanes apply calls Compare and Execute itself, with the lock before and
// the confirmation between them; simulate --live does not use it.
func Apply(ctx context.Context, conn *connect.Conn, p *planner.Plan, o Options) (*Diff, *Result, error) {
	d, err := Compare(ctx, conn, p, o)
	if err != nil {
		return nil, nil, err
	}
	res, err := Execute(ctx, conn, d)
	return d, res, err
}

// Execute carries out a diff: the stream first, then every lane with many
// requests in flight, then a repartition's switch, drain, resume and
// delete, then --prune. It refuses a diff with refusals, changing nothing.
func Execute(ctx context.Context, conn *connect.Conn, d *Diff) (*Result, error) {
	res := &Result{}
	if d.Refused() {
		return res, &RefusedError{Reasons: d.Refusals}
	}
	x := &executor{a: jsapi.New(conn), d: d, o: d.opts, stream: d.plan.Stream.Name, res: res}
	start := time.Now()
	defer func() {
		res.WriteRequests, res.RefusedWrites = x.a.Writes(), x.a.RefusedWrites()
		res.Elapsed = time.Since(start)
	}()
	ctx, cancel := x.a.Guard(ctx)
	defer cancel()
	steps := []struct {
		run  func(context.Context) error
		left func() []string
	}{{x.applyStream, x.streamLeft}, {x.applyLanes, x.lanesLeft}, {x.repartition, x.repartitionLeft}, {x.prune, x.pruneLeft}}
	for i, step := range steps {
		err := step.run(ctx)
		if err == nil {
			continue
		}
		if !stopsAll(ctx, err) {
			return res, err
		}
		// The server went away or the run was interrupted: say what is
		// left, from the step that stopped on.
		var left []string
		var se *StoppedError
		if errors.As(err, &se) {
			left, err = se.Remaining, se.Err
		} else {
			left = step.left()
		}
		for _, later := range steps[i+1:] {
			left = append(left, later.left()...)
		}
		res.Remaining = left
		return res, &StoppedError{Err: err, Remaining: left}
	}
	if u := d.Unavailable(); len(u) > 0 {
		res.Incomplete = append(res.Incomplete, fmt.Sprintf("%d lanes could not be read and were left as they are (%s): re-run apply when their servers are back",
			len(u), shortList(u, 5)))
	}
	if len(res.Incomplete) > 0 {
		return res, &IncompleteError{Reasons: res.Incomplete}
	}
	return res, nil
}

type executor struct {
	a      *jsapi.Client
	d      *Diff
	o      Options
	stream string
	res    *Result

	mu sync.Mutex // guards res counters and progress calls
}

func (x *executor) count(f func(r *Result)) {
	x.mu.Lock()
	f(x.res)
	x.mu.Unlock()
}

func (x *executor) progress(phase Phase, done, total int64) {
	if x.o.Progress != nil {
		x.o.Progress(Progress{Phase: phase, Done: done, Total: total})
	}
}

func (x *executor) concurrency() int {
	if x.o.Concurrency > 0 {
		return x.o.Concurrency
	}
	return DefaultConcurrency
}

// applyStream creates the stream, or updates only what lanes needs.
func (x *executor) applyStream(ctx context.Context) error {
	sc := x.d.Stream
	switch sc.Action {
	case ActionCreate:
		body := toMap(x.d.plan.Stream)
		sc.edit.onto(body)
		if err := x.a.CreateStream(ctx, x.stream, body); err != nil {
			return fmt.Errorf("creating stream %s: %w", x.stream, err)
		}
		x.res.StreamCreated = true
		if m := x.d.plan; m.Design.Mapping == planner.MappingAccount {
			// Done as far as apply can go (exit 0): no re-run can see the
			// mapping, so the operator's part is a warning, not "incomplete".
			x.res.Warnings = append(x.res.Warnings, fmt.Sprintf(
				"publishes to %s reach stream %s only once the operator installs the account mapping %s -> %s on every server (lanes plan -o conf or -o nsc)",
				m.Mapping.Source, x.stream, m.Mapping.Source, m.Mapping.Destination))
		}
	case ActionUpdate:
		_, changed, err := x.updateStream(ctx, sc.edit)
		if err != nil {
			return err
		}
		x.res.StreamUpdated = changed
	}
	return nil
}

// updateStream reads the stream as it is now and sends it back with the
// edit applied: a stream update replaces the whole config, and starting
// from an older read would revert what others changed since. Nothing is
// sent when the edit is already in place. It returns the stream as it was
// before, and whether it changed.
func (x *executor) updateStream(ctx context.Context, edit *streamEdit) (*jsapi.RawStreamInfo, bool, error) {
	info, err := x.a.StreamInfoRaw(ctx, x.stream)
	if err != nil {
		return nil, false, fmt.Errorf("reading stream %s before updating it: %w", x.stream, err)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(info.Config, &body); err != nil {
		return nil, false, err
	}
	if !edit.onto(body) {
		return info, false, nil
	}
	if err := x.a.UpdateStream(ctx, x.stream, body); err != nil {
		return nil, false, fmt.Errorf("updating stream %s: %w", x.stream, err)
	}
	return info, true, nil
}

// applyLanes makes every planned lane as designed, many requests in flight.
func (x *executor) applyLanes(ctx context.Context) error {
	work := x.laneWork()
	errs := x.parallel(ctx, PhaseLanes, len(work), func(ctx context.Context, i int) error {
		return x.laneStep(ctx, work[i])
	})
	return x.failed(ctx, work, errs)
}

// laneWork is the planned lanes that need a request.
func (x *executor) laneWork() []*LaneChange {
	var work []*LaneChange
	for i := range x.d.Lanes {
		l := &x.d.Lanes[i]
		switch l.Action {
		case ActionCreate, ActionUpdate, ActionHold, ActionResume, ActionRecreate, ActionFinish:
			work = append(work, l)
		case ActionUnchanged:
			if l.placeholder != nil {
				work = append(work, l)
			}
		}
	}
	return work
}

func (x *executor) laneStep(ctx context.Context, l *LaneChange) error {
	switch l.Action {
	case ActionCreate:
		if l.Missing != nil {
			return x.createMissing(ctx, l)
		}
		if _, err := x.a.CreateConsumer(ctx, x.stream, l.want.Durable, createBody(l.want, l.Held, l.StartSeq)); err != nil {
			return err
		}
		x.count(func(r *Result) {
			r.Created++
			if l.Held {
				r.Held++
			}
		})
	case ActionUpdate, ActionHold, ActionResume:
		if err := x.changeLane(ctx, l.Name, l.live.Config, l.want, l.Action); err != nil {
			return err
		}
		x.count(func(r *Result) {
			switch l.Action {
			case ActionHold:
				r.Held++
			case ActionResume:
				r.Resumed++
			default:
				r.Updated++
			}
		})
	case ActionRecreate:
		return x.recreate(ctx, l)
	case ActionFinish:
		return x.finish(ctx, l)
	}
	if l.placeholder != nil {
		return x.cleanUpRecreate(ctx, l)
	}
	return nil
}

// changeLane updates a live lane to the design, holding or resuming it.
// A consumer update cannot change a pause (the server keeps the current
// one), so holds go through the PAUSE API, and every config update is
// made while the lane is paused: hold = pause, then mark; resume = unmark,
// then unpause. (In a cluster, updating a lane that is delivering can make
// it deliver its first messages again.) A hold is recognised by its marker
// or by its pause date, so an interruption between the two requests is
// harmless.
func (x *executor) changeLane(ctx context.Context, name string, live jetstream.ConsumerConfig, want planner.ConsumerConfig, action Action) error {
	body := updateBody(live, want)
	switch action {
	case ActionHold:
		if err := x.pause(ctx, name, heldUntil); err != nil {
			return err
		}
		setMeta(body, planner.MetaHeld, heldValue)
	case ActionResume:
		setMeta(body, planner.MetaHeld, "")
	}
	if action == ActionUpdate || x.configDiffers(live, body) {
		if err := x.releasePin(ctx, name, live, body); err != nil {
			return err
		}
		if _, err := x.a.UpdateConsumer(ctx, x.stream, name, body); err != nil {
			return err
		}
	}
	if action == ActionResume {
		return x.pause(ctx, name, time.Time{})
	}
	return nil
}

// pinReleaseTTL is the pinned TTL a lane's pin gets while its pinned
// group is taken away.
const pinReleaseTTL = time.Second

// releasePin readies a lane whose pinned priority group an update takes
// away (keys in flight back to 1, or pinned: false). nats-server
// (2.11-2.15) keeps the lane's pin through such an update, and the pulls
// that no longer name the group then get nothing until the pin's TTL runs
// out (2 minutes by default), while the pin can no longer be released (the
// group is gone). So the pin's TTL is made pinReleaseTTL first and the pin
// released; a pin taken again before the update lasts that long.
func (x *executor) releasePin(ctx context.Context, name string, live jetstream.ConsumerConfig, body map[string]json.RawMessage) error {
	if live.PriorityPolicy != jetstream.PriorityPolicyPinned || len(live.PriorityGroups) == 0 {
		return nil
	}
	if p, ok := body["priority_policy"]; ok && string(p) == `"pinned_client"` {
		return nil
	}
	short := maps.Clone(body)
	short["priority_groups"] = raw(live.PriorityGroups)
	short["priority_policy"] = raw("pinned_client")
	short["priority_timeout"] = raw(int64(pinReleaseTTL))
	if _, err := x.a.UpdateConsumer(ctx, x.stream, name, short); err != nil {
		return err
	}
	return x.a.UnpinConsumer(ctx, x.stream, name, live.PriorityGroups[0])
}

// configDiffers reports whether sending body would change the lane.
func (x *executor) configDiffers(live jetstream.ConsumerConfig, body map[string]json.RawMessage) bool {
	cur := toMap(live)
	for k, v := range body {
		if k == "pause_until" {
			continue
		}
		if !jsonEqual(cur[k], v) {
			return true
		}
	}
	return false
}

// pause pauses a lane until a time, or resumes it (zero time).
func (x *executor) pause(ctx context.Context, name string, until time.Time) error {
	return x.a.PauseConsumer(ctx, x.stream, name, until)
}

// deleteConsumer deletes a consumer; one already gone is fine.
func (x *executor) deleteConsumer(ctx context.Context, name string) error {
	err := x.a.DeleteConsumer(ctx, x.stream, name)
	if jsapi.IsConsumerNotFound(err) {
		return nil
	}
	return err
}

// prune deletes the lanes --prune selected.
func (x *executor) prune(ctx context.Context) error {
	return x.deleteLanes(ctx, x.pruneWork())
}

func (x *executor) pruneWork() []*LaneChange {
	var work []*LaneChange
	for i := range x.d.Lanes {
		if l := &x.d.Lanes[i]; l.Action == ActionDelete {
			work = append(work, l)
		}
	}
	return work
}

// deleteLanes deletes lanes, many at once, counting what was deleted.
func (x *executor) deleteLanes(ctx context.Context, work []*LaneChange) error {
	errs := x.parallel(ctx, PhaseDelete, len(work), func(ctx context.Context, i int) error {
		if err := x.deleteConsumer(ctx, work[i].Name); err != nil {
			return err
		}
		x.count(func(r *Result) { r.Deleted++ })
		return nil
	})
	return x.failed(ctx, work, errs)
}

// parallel runs fn for 0..n-1 with at most Concurrency in flight, and
// reports progress. The first error that means no request can succeed (an
// interruption, no answer within --timeout, a lost connection, permission
// denied) stops the phase at once: the requests in flight are cancelled
// and the rest are not sent (errNotStarted), instead of each waiting its
// own timeout.
func (x *executor) parallel(ctx context.Context, phase Phase, n int, fn func(context.Context, int) error) []error {
	errs := make([]error, n)
	if n == 0 {
		return errs
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var g errgroup.Group
	g.SetLimit(x.concurrency())
	var done int64
	x.progress(phase, 0, int64(n))
	for i := range n {
		if ctx.Err() != nil {
			for j := i; j < n; j++ {
				errs[j] = errNotStarted
			}
			break
		}
		g.Go(func() error {
			if ctx.Err() != nil { // stopped while this one waited for its turn
				errs[i] = errNotStarted
				return nil
			}
			errs[i] = fn(ctx, i)
			if stopsAll(ctx, errs[i]) {
				stop(errs[i])
			}
			x.mu.Lock()
			done++
			x.progress(phase, done, int64(n))
			x.mu.Unlock()
			return nil
		})
	}
	g.Wait()
	return errs
}

// failed turns per-lane errors into one error, recording each failure the
// server answered. When the phase stopped (see parallel), the lanes not
// done or not confirmed are what is left, and the cause is the error.
func (x *executor) failed(ctx context.Context, work []*LaneChange, errs []error) error {
	fe := &FailedError{}
	var cause error
	stopped := false
	for _, err := range errs {
		if err == errNotStarted || stopsAll(ctx, err) {
			stopped = true
			if cause == nil && err != errNotStarted {
				cause = err
			}
		}
	}
	var left []int
	for i, err := range errs {
		switch {
		case err == nil:
		case stopped && !answered(err):
			left = append(left, i)
		default:
			fe.Failures = append(fe.Failures, Failure{Lane: work[i].Name, Action: work[i].Action, Error: err.Error()})
			fe.errs = append(fe.errs, err)
		}
	}
	x.res.Failures = append(x.res.Failures, fe.Failures...)
	if len(left) > 0 {
		if ctx.Err() != nil {
			cause = context.Cause(ctx)
		}
		if cause == nil {
			cause = errNotStarted
		}
		return &StoppedError{Err: cause, Remaining: append(leftOver(work, left), failedLeft(fe)...)}
	}
	if len(fe.Failures) == 0 {
		return nil
	}
	return fe
}

// failedLeft names lanes whose request the server refused, for a run
// that also stopped: a re-run tries them again.
func failedLeft(fe *FailedError) []string {
	if len(fe.Failures) == 0 {
		return nil
	}
	names := make([]string, len(fe.Failures))
	for i, f := range fe.Failures {
		names[i] = f.Lane
	}
	return []string{fmt.Sprintf("retry %d lane changes the server refused (%s)", len(names), shortList(names, 3))}
}

func shortList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
