package actions

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// SkipOptions say which message to skip and how.
type SkipOptions struct {
	Seq    uint64 // the message's stream sequence
	Park   bool   // park it on the workers' dead-letter subject; else terminate it
	Reason string
	By     string        // who skips, recorded with the request
	Wait   time.Duration // how long to wait for the serving instance's outcome
	DryRun bool
}

// SkipOutcome is what lanes skip did (or, in a dry run, would do).
type SkipOutcome struct {
	Action      string    `json:"action"` // "skip"
	Stream      string    `json:"stream"`
	Design      string    `json:"design"`
	Lane        string    `json:"lane"`
	KeyParallel bool      `json:"key_parallel"`
	Seq         uint64    `json:"seq"`
	Subject     string    `json:"subject"`
	Key         string    `json:"key,omitempty"`
	Stored      time.Time `json:"stored"`
	Age         string    `json:"age"`
	// Attempts is how often it was delivered so far, when known (a
	// serial lane's head out now).
	Attempts int    `json:"attempts,omitempty"`
	How      string `json:"how"` // term or park
	// DeadLetter is where a park puts it.
	DeadLetter string `json:"dead_letter,omitempty"`
	// RunningOn is the lanes work instance serving the lane ("" when none).
	RunningOn string `json:"running_on,omitempty"`
	// SettledBy is who settles it: the serving instance, or lanes skip
	// itself (a consumer reset) when none serves the lane.
	SettledBy string `json:"settled_by"`
	// Result: terminated, parked, would terminate, would park, already
	// terminated, already parked.
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
	DryRun bool   `json:"dry_run"`
	// Changed: this run settled it (or, in a dry run, would); false when
	// an earlier run, or another operator's at the same moment, did.
	Changed bool `json:"changed"`
}

// SkipPendingError: the request is recorded, but the instance serving the
// lane has not settled the message within the wait (it settles it when it
// next holds it: at its redelivery, or when its key's earlier message is
// settled). A re-run of the same command waits again and shows the
// outcome.
type SkipPendingError struct{ msg string }

func (e *SkipPendingError) Error() string { return e.msg }

// bySkip is who settles a message lanes skip settles itself.
const bySkip = "lanes skip"

// Skip settles the selected lane's message seq without running it:
// terminated (+TERM), or parked on the workers' dead-letter subject with
// the Lanes-Parked-* headers. The request goes into the membership bucket
// (one per lane, create-only, so two operators never skip two messages);
// the instance serving the lane stops its handler and settles it, and
// Skip waits for its outcome. When no instance serves the lane, Skip
// resets the lane's consumer past the message itself (nats-server 2.14+),
// if that is safe: it must be the lane's first unacknowledged message,
// with nothing after it delivered.
//
// It refuses a lane that moved past seq, a message that is not a serial
// lane's head, and a request for another message of the lane still under
// way. A re-run after an interruption finishes the request, or says it
// was done.
func Skip(ctx context.Context, c *connect.Conn, sel *Selection, o SkipOptions) (*SkipOutcome, error) {
	if len(sel.Lanes) != 1 {
		return nil, inputErrorf("lanes skip acts on one lane, and %d are selected (%s): name one with --lanes, or a key with --key", len(sel.Lanes), strings.Join(sel.Names(), ", "))
	}
	r, l := sel.Report, sel.Lanes[0]
	if o.Seq == 0 {
		return nil, inputErrorf("--seq: name the message to skip by its stream sequence (lanes inspect shows a lane's head)")
	}
	if o.Seq > r.LastSeq {
		return nil, inputErrorf("--seq %d is beyond stream %s (its last sequence is %d)", o.Seq, r.Stream, r.LastSeq)
	}
	s, err := c.JS.Stream(ctx, r.Stream)
	if err != nil {
		return nil, err
	}
	raw, err := s.GetMsg(ctx, o.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, inputErrorf("--seq %d is not in stream %s (deleted, or removed by its retention)", o.Seq, r.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("reading seq %d: %w", o.Seq, err)
	}
	if !subjectMatches(l.Filter, raw.Subject) {
		return nil, inputErrorf("--seq %d (%s) is not on lane %s (its filter is %s)", o.Seq, planner.Printable(raw.Subject, 256), l.Name, l.Filter)
	}
	api := jsapi.New(c)
	ci, err := api.ConsumerInfo(ctx, r.Stream, l.Name)
	if err != nil {
		return nil, fmt.Errorf("reading lane %s: %w", l.Name, err)
	}
	out := &SkipOutcome{Action: "skip", Stream: r.Stream, Design: l.Design, Lane: l.Name, KeyParallel: l.KeyParallel(), Seq: o.Seq,
		Subject: raw.Subject, Key: keyOf(r, l, raw.Subject), Stored: raw.Time.UTC(), Age: time.Since(raw.Time).Round(time.Second).String(),
		How: membership.SkipTerm, DryRun: o.DryRun}
	if l.Head != nil && l.Head.Seq == o.Seq && !l.KeyParallel() {
		out.Attempts = l.HeadDeliveries
	}
	served := l.Server != nil && !l.Server.Gone
	if served {
		out.RunningOn = l.Server.Instance
	}
	if o.Park {
		out.How = membership.SkipPark
		if out.DeadLetter = deadLetterOf(r, l); out.DeadLetter == "" {
			return nil, refusedf("--park: no dead-letter subject is known for design %q: its lanes work instances were started without one; start them with --dead-letter SUBJECT (a stream must store it), or skip with --term", l.Design)
		}
	}

	skips, err := readSkips(ctx, c.JS, r, l, o.DryRun)
	if err != nil {
		return nil, err
	}
	var prev *membership.SkipEntry
	if skips != nil {
		if prev, err = skips.Get(ctx, l.Name); err != nil {
			return nil, err
		}
	}
	if prev != nil && prev.Seq == o.Seq {
		return resumeSkip(ctx, c, skips, l, prev, out, o, false)
	}
	if prev != nil && prev.Pending() && ci.AckFloor.Stream < prev.Seq {
		return nil, refusedf("another skip of lane %s is under way: seq %d, asked by %s at %s; wait for it (lanes skip --lanes %s --seq %d shows its outcome)",
			l.Name, prev.Seq, prev.By, prev.At.Format(time.RFC3339), l.Name, prev.Seq)
	}
	if err := checkSkippable(ctx, api, r.Stream, l, o.Seq, ci); err != nil {
		return nil, err
	}
	actor := membership.SkipByWorker
	out.SettledBy = out.RunningOn
	if !served {
		actor, out.SettledBy = membership.SkipByCommand, bySkip+" (a consumer reset past it)"
		if err := checkResettable(ctx, c, api, r.Stream, l, o.Seq, ci); err != nil {
			return nil, err
		}
	}
	out.Changed = true
	if o.DryRun {
		out.Result = "would " + map[string]string{membership.SkipTerm: "terminate", membership.SkipPark: "park"}[out.How]
		return out, nil
	}
	sk := membership.Skip{Seq: o.Seq, Action: out.How, Reason: o.Reason, By: o.By, At: time.Now().UTC(), DeadLetter: out.DeadLetter, Actor: actor}
	var prevRev uint64
	if prev != nil {
		prevRev = prev.Rev // a finished request, or one the lane moved past: replaced
	}
	rev, err := skips.Put(ctx, l.Name, sk, prevRev)
	if errors.Is(err, membership.ErrSkipChanged) {
		// Another operator asked at the same moment: the same message is
		// joined, any other refused.
		cur, gerr := skips.Get(ctx, l.Name)
		if gerr != nil {
			return nil, gerr
		}
		if cur != nil && cur.Seq == o.Seq {
			out.Changed = false
			return resumeSkip(ctx, c, skips, l, cur, out, o, true)
		}
		who := "another operator"
		if cur != nil {
			who = fmt.Sprintf("%s (seq %d)", cur.By, cur.Seq)
		}
		return nil, refusedf("another skip of lane %s was asked at the same moment by %s: nothing changed; look at the lane again (lanes inspect)", l.Name, who)
	}
	if err != nil {
		return nil, err
	}
	return settle(ctx, c, skips, l, &membership.SkipEntry{Skip: sk, Rev: rev}, out, o)
}

// resumeSkip goes on with a request for the same message found in the
// bucket: an earlier run's (interrupted) or another operator's.
func resumeSkip(ctx context.Context, c *connect.Conn, skips *membership.Skips, l *health.Lane, e *membership.SkipEntry, out *SkipOutcome, o SkipOptions, joined bool) (*SkipOutcome, error) {
	out.How, out.DeadLetter = e.Action, e.DeadLetter
	if !joined {
		out.Changed = false
	}
	if e.Done != nil {
		return doneOutcome(l, e, out)
	}
	if o.DryRun {
		out.Result, out.Detail = "being skipped", fmt.Sprintf("asked by %s at %s; a run without --dry-run waits for its outcome", e.By, e.At.Format(time.RFC3339))
		out.SettledBy = settledBy(e, out)
		return out, nil
	}
	served := l.Server != nil && !l.Server.Gone
	if e.Actor == membership.SkipByWorker && !served {
		// Its instance is gone and nobody took the lane: lanes skip
		// does it, if that is safe (the request says so first, so that an
		// instance taking the lane now does not run it).
		api := jsapi.New(c)
		ci, err := api.ConsumerInfo(ctx, out.Stream, l.Name)
		if err != nil {
			return nil, err
		}
		if ci.AckFloor.Stream < e.Seq {
			if err := checkResettable(ctx, c, api, out.Stream, l, e.Seq, ci); err != nil {
				return nil, err
			}
			sk := e.Skip
			sk.Actor = membership.SkipByCommand
			rev, err := skips.Put(ctx, l.Name, sk, e.Rev)
			if err != nil {
				return nil, fmt.Errorf("taking over the skip of lane %s: %w", l.Name, err)
			}
			e = &membership.SkipEntry{Skip: sk, Rev: rev}
		}
	}
	return settle(ctx, c, skips, l, e, out, o)
}

// settle carries out a pending request: lanes skip resets the lane past
// the message when it is the request's actor; otherwise the serving
// instance does it, and settle waits for its outcome.
func settle(ctx context.Context, c *connect.Conn, skips *membership.Skips, l *health.Lane, e *membership.SkipEntry, out *SkipOutcome, o SkipOptions) (*SkipOutcome, error) {
	out.SettledBy = settledBy(e, out)
	if e.Actor == membership.SkipByCommand {
		var park *work.Parking
		if e.Action == membership.SkipPark {
			park = &work.Parking{DeadLetter: e.DeadLetter, Reason: reasonOf(e), Instance: bySkip, Attempts: out.Attempts,
				Key: func(string) string { return out.Key }}
		}
		result, detail := membership.SkipTerminated, "no lanes work instance served the lane: its consumer was reset past it"
		if park != nil {
			result = membership.SkipParked
		}
		err := work.ResetPast(ctx, jsapi.New(c), c.JS, out.Stream, l.Name, e.Seq, park)
		var moved *work.MovedPastError
		var notHead *work.NotHeadError
		switch {
		case errors.As(err, &moved):
			// An earlier run reset it and was stopped before it said so:
			// instances never run a message such a request names.
			detail = "an earlier lanes skip had reset the lane past it"
		case errors.As(err, &notHead):
			return nil, refusedf("%v: nothing changed", err)
		case err != nil:
			return nil, err
		}
		done := membership.SkipDone{Result: result, By: bySkip, At: time.Now(), Detail: detail}
		if _, err := skips.Finish(ctx, l.Name, e, done); err != nil && !errors.Is(err, membership.ErrSkipChanged) {
			return nil, err
		}
		e.Done = &done
		return doneOutcome(l, e, out)
	}
	done, err := waitDone(ctx, skips, l.Name, e, o.Wait)
	if err != nil {
		return nil, err
	}
	if done == nil {
		return nil, &SkipPendingError{fmt.Sprintf("the skip of seq %d on lane %s is recorded, but %s has not settled it within %s: it does when it next holds the message (its redelivery, or once its key's earlier message is settled), and never runs it meanwhile; run the same command again to see the outcome",
			e.Seq, l.Name, out.SettledBy, o.Wait)}
	}
	return doneOutcome(l, done, out)
}

// doneOutcome reports a finished request; a message that was not skipped
// after all (it ran first, or the lane had moved past it) is refused.
func doneOutcome(l *health.Lane, e *membership.SkipEntry, out *SkipOutcome) (*SkipOutcome, error) {
	d := e.Done
	switch d.Result {
	case membership.SkipRan, membership.SkipPassed:
		return out, refusedf("seq %d of lane %s was not skipped: %s", e.Seq, l.Name, detailOr(d, "the lane had moved past it"))
	}
	out.Result, out.Detail, out.SettledBy = d.Result, d.Detail, d.By
	if !out.Changed {
		out.Result = "already " + d.Result
		out.Detail = strings.TrimPrefix(fmt.Sprintf("%s; asked by %s at %s, settled at %s", d.Detail, e.By, e.At.Format(time.RFC3339), d.At.Format(time.RFC3339)), "; ")
	}
	return out, nil
}

func detailOr(d *membership.SkipDone, s string) string {
	if d.Detail != "" {
		return d.Detail
	}
	return s
}

func settledBy(e *membership.SkipEntry, out *SkipOutcome) string {
	if e.Actor == membership.SkipByCommand {
		return bySkip + " (a consumer reset past it)"
	}
	if out.RunningOn != "" {
		return out.RunningOn
	}
	return "the next lanes work instance to serve the lane"
}

func reasonOf(e *membership.SkipEntry) string {
	s := "skipped by " + e.By
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return planner.OneLine(s, 256)
}

// waitDone waits for the request's outcome, at most wait; nil when it did
// not come.
func waitDone(ctx context.Context, skips *membership.Skips, lane string, e *membership.SkipEntry, wait time.Duration) (*membership.SkipEntry, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	kw, err := skips.KV.Watch(wctx, membership.SkipKey(skips.Stream, skips.Design, lane))
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("waiting for the skip's outcome: %w", err)
	}
	defer func() { _ = kw.Stop() }()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, nil
		case ent, ok := <-kw.Updates():
			if !ok {
				return nil, nil
			}
			cur, _ := membership.ParseSkip(ent)
			if cur == nil || cur.Seq != e.Seq {
				continue
			}
			if cur.Done != nil {
				return cur, nil
			}
		}
	}
}

// checkSkippable refuses a message the lane has moved past, and on a
// serial lane one that is not its head.
func checkSkippable(ctx context.Context, api *jsapi.Client, stream string, l *health.Lane, seq uint64, ci *jetstream.ConsumerInfo) error {
	if ci.AckFloor.Stream >= seq {
		return refusedf("lane %s has moved past seq %d (its ack floor is seq %d): nothing to skip, nothing changed", l.Name, seq, ci.AckFloor.Stream)
	}
	if l.KeyParallel() {
		return nil
	}
	head, err := api.NextMsg(ctx, stream, ci.AckFloor.Stream+1, l.Filter, false)
	if err != nil {
		return fmt.Errorf("reading the head of lane %s: %w", l.Name, err)
	}
	if head.Seq != seq {
		return refusedf("seq %d is not the head of lane %s: its head is seq %d (%s); skip that one, or look again (lanes inspect): nothing changed", seq, l.Name, head.Seq, planner.Printable(head.Subject, 256))
	}
	return nil
}

// checkResettable: with no instance serving the lane, lanes skip moves it
// past the message with a consumer reset, which needs nats-server 2.14+
// and must deliver nothing again: the message must be the lane's first
// unacknowledged one, with nothing after it delivered (on a key-parallel
// lane, other keys' messages may be out).
func checkResettable(ctx context.Context, c *connect.Conn, api *jsapi.Client, stream string, l *health.Lane, seq uint64, ci *jetstream.ConsumerInfo) error {
	if v := c.NC.ConnectedServerVersion(); !atLeast(v, 2, 14) {
		return refusedf("no lanes work instance serves lane %s, and nats-server %s cannot reset a consumer (2.14+): start lanes work for the design and run lanes skip again; nothing changed", l.Name, v)
	}
	if ci.Delivered.Stream > seq {
		return refusedf("no lanes work instance serves lane %s, and messages after seq %d were delivered (up to seq %d): a reset past it would deliver them again; start lanes work for the design and run lanes skip again; nothing changed", l.Name, seq, ci.Delivered.Stream)
	}
	head, err := api.NextMsg(ctx, stream, ci.AckFloor.Stream+1, l.Filter, false)
	if err != nil {
		return fmt.Errorf("reading the head of lane %s: %w", l.Name, err)
	}
	if head.Seq != seq {
		return refusedf("no lanes work instance serves lane %s, and seq %d is not its first unacknowledged message (seq %d is): a reset past it would skip that one too; start lanes work and run lanes skip again; nothing changed", l.Name, seq, head.Seq)
	}
	return nil
}

// readSkips binds the membership bucket (a dry run creates nothing: nil
// when there is no bucket).
func readSkips(ctx context.Context, js jetstream.JetStream, r *health.Report, l *health.Lane, dryRun bool) (*membership.Skips, error) {
	if dryRun {
		kv, err := js.KeyValue(ctx, membership.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("membership bucket %s: %w", membership.Bucket, err)
		}
		return &membership.Skips{KV: kv, Stream: r.Stream, Design: l.Design}, nil
	}
	return membership.OpenSkips(ctx, js, r.Stream, l.Design, r.Replicas)
}

// deadLetterOf is the dead-letter subject of the design's workers: the
// serving instance's, else any live one's, else one they parked on.
func deadLetterOf(r *health.Report, l *health.Lane) string {
	for _, w := range r.Workers {
		if w.Design != l.Design {
			continue
		}
		for _, m := range w.Live {
			if l.Server != nil && m.Instance == l.Server.Instance && m.DeadLetter != "" {
				return m.DeadLetter
			}
		}
		for _, m := range append(append([]membership.Member{}, w.Live...), w.Gone...) {
			if m.DeadLetter != "" {
				return m.DeadLetter
			}
		}
		for _, p := range w.Parked {
			if p.Subject != "" {
				return p.Subject
			}
		}
	}
	return ""
}

// keyOf reads a stored subject's key with the lane's layout.
func keyOf(r *health.Report, l *health.Lane, subject string) string {
	for _, lay := range r.Layouts {
		if lay.Partitions != l.Partitions {
			continue
		}
		if parsed, err := planner.ParseLayout(lay.Source, lay.Destination); err == nil {
			if k, ok := parsed.StoredKey(subject); ok {
				return k
			}
		}
	}
	return ""
}

// subjectMatches: subject matches a filter with * and > wildcards.
func subjectMatches(filter, subject string) bool {
	if filter == "" {
		return true
	}
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || t != "*" && t != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

// atLeast says whether a server version is at least major.minor.
func atLeast(version string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(strings.TrimPrefix(version, "v"), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
