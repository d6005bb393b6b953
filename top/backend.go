package top

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/jsapi"
)

// Backend is what the view asks of the server besides the refreshes: an
// action (planned as a dry run first, for the confirmation), a lane's
// head message and parked messages, and a key's last message. Live is
// the real one; tests may pass their own.
type Backend interface {
	Act(a *Action, t actions.Target, by string, dryRun bool) (*actions.Outcome, error)
	Head(stream string, seq uint64) (*Message, error)
	// Skip and Rewind select the target's lanes and call the actions
	// package, as lanes skip and lanes rewind do.
	Skip(t actions.Target, o actions.SkipOptions) (*actions.SkipOutcome, error)
	Rewind(t actions.Target, o actions.RewindOptions) (*actions.RewindOutcome, error)
	// Parked reads the parked messages of sel's one lane.
	Parked(sel *actions.Selection) (*actions.Parked, error)
	// Last is the last message stored on subject; nil (no error) when
	// there is none.
	Last(stream, subject string) (*Message, error)
}

// Action is one keyboard action on the selected lane, or on every lane
// of its design, that a yes or no settles: a key, a name, what it does
// in words (the confirmation says it), and Run on the lanes
// actions.Select picked. Skip and rewind ask more first (term or park;
// the point to go back to): they are flows of their own (act.go).
type Action struct {
	Key   string
	Name  string // "pause"
	Whole bool   // every lane of the design (its current generation), not the selected lane
	// Effect says what happens to a lane, for the confirmation.
	Effect string
	Run    func(ctx context.Context, c *connect.Conn, sel *actions.Selection, by string, dryRun bool) (*actions.Outcome, error)
}

func pause(ctx context.Context, c *connect.Conn, sel *actions.Selection, by string, dryRun bool) (*actions.Outcome, error) {
	return actions.Pause(ctx, c, sel, actions.PauseOptions{By: by, Reason: "paused from lanes top", DryRun: dryRun})
}

func resume(ctx context.Context, c *connect.Conn, sel *actions.Selection, _ string, dryRun bool) (*actions.Outcome, error) {
	return actions.Resume(ctx, c, sel, dryRun)
}

const (
	pauseEffect  = "A paused lane delivers nothing until resumed: its worker finishes the message it holds, then waits. Nothing is lost and no position moves."
	resumeEffect = "Workers pull again at once; each key's waiting messages run in order."
)

// Actions are the keyboard's yes-or-no actions.
var Actions = []*Action{
	{Key: "p", Name: "pause", Effect: pauseEffect, Run: pause},
	{Key: "P", Name: "pause", Whole: true, Effect: pauseEffect, Run: pause},
	{Key: "u", Name: "resume", Effect: resumeEffect, Run: resume},
	{Key: "U", Name: "resume", Whole: true, Effect: resumeEffect, Run: resume},
}

// Message is a stored message as the drill-down shows it.
type Message struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Header  nats.Header
	Data    []byte
}

// Live is the Backend on a connection: the actions package for actions,
// the JetStream API (through jsapi, as health reads heads) for messages.
type Live struct {
	Conn *connect.Conn
	Ctx  context.Context // ends with the view: an action under way is cancelled
}

// actionTimeout bounds one action: selecting reads every lane once, then
// one request per lane changed.
const actionTimeout = 2 * time.Minute

// Act selects the target's lanes as the CLI actions do and runs a.
func (l *Live) Act(a *Action, t actions.Target, by string, dryRun bool) (*actions.Outcome, error) {
	ctx, cancel := context.WithTimeout(l.Ctx, actionTimeout)
	defer cancel()
	sel, err := actions.Select(ctx, l.Conn, t)
	if err != nil {
		return nil, err
	}
	return a.Run(ctx, l.Conn, sel, by, dryRun)
}

// Skip selects t's lane and skips (or plans to skip) a message of it.
func (l *Live) Skip(t actions.Target, o actions.SkipOptions) (*actions.SkipOutcome, error) {
	ctx, cancel := context.WithTimeout(l.Ctx, actionTimeout+o.Wait)
	defer cancel()
	sel, err := actions.Select(ctx, l.Conn, t)
	if err != nil {
		return nil, err
	}
	return actions.Skip(ctx, l.Conn, sel, o)
}

// Rewind selects t's lanes and rewinds (or plans to rewind) them.
func (l *Live) Rewind(t actions.Target, o actions.RewindOptions) (*actions.RewindOutcome, error) {
	ctx, cancel := context.WithTimeout(l.Ctx, actionTimeout+o.Drain)
	defer cancel()
	sel, err := actions.Select(ctx, l.Conn, t)
	if err != nil {
		return nil, err
	}
	return actions.Rewind(ctx, l.Conn, sel, o)
}

// Parked reads the parked messages of sel's lane: the selection is made
// from the view's last report (no second reading of every lane), and
// ReadParked keeps the lane's own.
func (l *Live) Parked(sel *actions.Selection) (*actions.Parked, error) {
	ctx, cancel := context.WithTimeout(l.Ctx, actionTimeout)
	defer cancel()
	return actions.ReadParked(ctx, l.Conn, sel, actions.ParkedFilter{Lanes: sel.Names()})
}

// Head reads message seq of the stream with its headers and payload.
func (l *Live) Head(stream string, seq uint64) (*Message, error) {
	return l.get(stream, map[string]any{"seq": seq}, fmt.Sprintf("message %d", seq))
}

// Last reads the last message stored on subject (a last-by-subject get);
// nil when the stream has none.
func (l *Live) Last(stream, subject string) (*Message, error) {
	m, err := l.get(stream, map[string]any{"last_by_subj": subject}, "the last message on "+subject)
	if jsapi.IsMessageNotFound(err) {
		return nil, nil
	}
	return m, err
}

// get is one STREAM.MSG.GET (every stream answers it, direct gets or
// not), with the headers decoded.
func (l *Live) get(stream string, req map[string]any, what string) (*Message, error) {
	ctx, cancel := l.Conn.Ctx(l.Ctx)
	defer cancel()
	var answer struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Time    time.Time `json:"time"`
			Hdrs    []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
		} `json:"message"`
	}
	if err := jsapi.New(l.Conn).Read(ctx, "STREAM.MSG.GET."+stream, req, &answer); err != nil {
		return nil, l.Conn.Diagnose(ctx, err)
	}
	m := answer.Message
	if m == nil {
		return nil, fmt.Errorf("unreadable answer to STREAM.MSG.GET.%s: no message", stream)
	}
	out := &Message{Seq: m.Seq, Subject: m.Subject, Time: m.Time, Data: m.Data}
	if len(m.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Hdrs)
		if err != nil {
			return nil, fmt.Errorf("%s: unreadable headers: %w", what, err)
		}
		out.Header = h
	}
	return out, nil
}

var _ Backend = (*Live)(nil)

// laneTarget is the target of a on lane l.
func laneTarget(a *Action, stream string, l *health.Lane) actions.Target {
	t := actions.Target{Stream: stream, Design: l.Design}
	if !a.Whole {
		t.Lanes = []string{l.Name}
	}
	return t
}
