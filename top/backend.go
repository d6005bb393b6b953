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
// action (planned as a dry run first, for the confirmation) and a lane's
// head message. Live is the real one; tests may pass their own.
type Backend interface {
	Act(a *Action, t actions.Target, by string, dryRun bool) (*actions.Outcome, error)
	Head(stream string, seq uint64) (*Message, error)
}

// Action is one keyboard action on the selected lane, or on every lane
// of its design. The table (Actions) is where skip and rewind go next:
// a key, a name, what it does in words (the confirmation says it), and
// Run on the lanes actions.Select picked.
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

// Actions are the keyboard's actions. Skip (a stuck head) and rewind come
// next: each is one more entry calling its actions function.
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

// Head reads message seq of the stream with its headers and payload
// (STREAM.MSG.GET: every stream answers it, direct gets or not).
func (l *Live) Head(stream string, seq uint64) (*Message, error) {
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
	if err := jsapi.New(l.Conn).Read(ctx, "STREAM.MSG.GET."+stream, map[string]any{"seq": seq}, &answer); err != nil {
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
			return nil, fmt.Errorf("message %d: unreadable headers: %w", seq, err)
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
