package top

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/health"
)

// Skip and rewind ask more than yes or no: skip, whether to terminate or
// park the head; rewind, the point to go back to. Each is planned with
// its action's dry run, whose answer the confirmation states; y carries
// it out with the same options, DryRun off.

// skipWait is how long a skip waits for the serving instance to settle
// the message (lanes skip --wait's default) when Config.SkipWait is 0.
const skipWait = 30 * time.Second

// skipPlan is a skip awaiting its confirmation: the dry runs of both
// ways (a park is refused when no dead-letter subject is known).
type skipPlan struct {
	target  actions.Target
	seq     uint64
	term    *actions.SkipOutcome
	park    *actions.SkipOutcome
	parkErr error
	parking bool // the way chosen
}

// chosen is the dry run of the way chosen.
func (p *skipPlan) chosen() *actions.SkipOutcome {
	if p.parking {
		return p.park
	}
	return p.term
}

type skipPlannedMsg struct {
	plan *skipPlan
	err  error
}

type skippedMsg struct {
	plan *skipPlan
	out  *actions.SkipOutcome
	err  error
}

// rewindPlan is a rewind awaiting its confirmation.
type rewindPlan struct {
	target actions.Target
	whole  bool
	point  string // as typed
	opts   actions.RewindOptions
	out    *actions.RewindOutcome
}

type rewindPlannedMsg struct {
	plan *rewindPlan
	err  error
}

type rewoundMsg struct {
	plan *rewindPlan
	out  *actions.RewindOutcome
	err  error
}

// refuse says why no action can start on lane l now ("" when one can).
func (m *Model) refuse(l *health.Lane) string {
	switch {
	case m.busy != "":
		return "wait: " + m.busy
	case m.backend == nil:
		return "no server to act on"
	case l == nil:
		return "no lane selected"
	case l.Design == "":
		return fmt.Sprintf("lane %s belongs to no design (lanes did not create it): lanes top does not act on it", printable(l.Name))
	}
	return ""
}

// planSkip starts a skip of the selected lane's head: both dry runs,
// term and park, so that t and p switch at once in the confirmation.
func (m *Model) planSkip() tea.Cmd {
	l := m.lane()
	if why := m.refuse(l); why != "" {
		m.say(true, "%s", why)
		return nil
	}
	if l.Head == nil {
		m.say(true, "lane %s has no head message to skip: nothing waits on it", printable(l.Name))
		return nil
	}
	p := &skipPlan{target: actions.Target{Stream: m.report.Stream, Design: l.Design, Lanes: []string{l.Name}}, seq: l.Head.Seq}
	m.busy = fmt.Sprintf("checking what a skip of seq %d would do to lane %s", p.seq, printable(l.Name))
	b, o := m.backend, m.skipOptions(p, true)
	return func() tea.Msg {
		var err error
		if p.term, err = b.Skip(p.target, o); err != nil {
			return skipPlannedMsg{plan: p, err: err}
		}
		o.Park = true
		p.park, p.parkErr = b.Skip(p.target, o)
		return skipPlannedMsg{plan: p}
	}
}

func (m *Model) skipOptions(p *skipPlan, dryRun bool) actions.SkipOptions {
	wait := m.cfg.SkipWait
	if wait <= 0 {
		wait = skipWait
	}
	return actions.SkipOptions{Seq: p.seq, Park: p.parking, Reason: "skipped from lanes top", By: m.cfg.By, Wait: wait, DryRun: dryRun}
}

func (m *Model) skipPlanned(msg skipPlannedMsg) {
	m.busy = ""
	p := msg.plan
	switch {
	case msg.err != nil:
		m.say(true, "skip seq %d of lane %s: %s", p.seq, printable(p.target.Lanes[0]), oneLine(msg.err))
	case !p.term.Changed:
		m.say(false, "nothing to skip: seq %d of lane %s is %s", p.seq, printable(p.target.Lanes[0]), printable(p.term.Result))
	default:
		m.skip = p
		m.back, m.mode = m.mode, modeSkip
	}
}

// skipping answers the skip's confirmation: t or p chooses the way, y
// does it, n or esc cancels.
func (m *Model) skipping(k tea.KeyMsg) tea.Cmd {
	p := m.skip
	switch k.String() {
	case "t":
		p.parking = false
	case "p":
		p.parking = true
	case "y", "Y":
		if p.parking && p.park == nil {
			return nil // not possible: the confirmation says why
		}
		m.skip, m.mode = nil, m.back
		m.busy = fmt.Sprintf("skipping seq %d of lane %s (waiting for %s)", p.seq, printable(p.target.Lanes[0]), printable(p.chosen().SettledBy))
		b, o := m.backend, m.skipOptions(p, false)
		return func() tea.Msg {
			out, err := b.Skip(p.target, o)
			return skippedMsg{plan: p, out: out, err: err}
		}
	case "n", "N", "esc", "q":
		m.skip, m.mode = nil, m.back
		m.say(false, "skip cancelled: nothing changed")
	}
	return nil
}

func (m *Model) skipped(msg skippedMsg) {
	m.busy = ""
	p, lane := msg.plan, printable(msg.plan.target.Lanes[0])
	var pending *actions.SkipPendingError
	switch {
	case errors.As(msg.err, &pending):
		m.sayLevel(levelWarn, "skip of seq %d on lane %s recorded, not settled yet: %s", p.seq, lane, oneLine(msg.err))
	case msg.err != nil:
		m.say(true, "skip seq %d of lane %s: %s", p.seq, lane, oneLine(msg.err))
	default:
		o := msg.out
		text := fmt.Sprintf("skip: seq %d of lane %s %s", p.seq, lane, printable(o.Result))
		if o.DeadLetter != "" {
			text += " on " + printable(o.DeadLetter)
		}
		text += " by " + printable(o.SettledBy)
		if o.Detail != "" {
			text += " (" + printable(o.Detail) + ")"
		}
		m.say(false, "%s; the next refresh shows the lane", text)
	}
}

// askRewind asks for the point to rewind the selected lane (or every
// lane of its design) to.
func (m *Model) askRewind(whole bool) tea.Cmd {
	l := m.lane()
	if why := m.refuse(l); why != "" {
		m.say(true, "%s", why)
		return nil
	}
	target := actions.Target{Stream: m.report.Stream, Design: l.Design}
	if !whole {
		target.Lanes = []string{l.Name}
	}
	m.rewind = &rewindPlan{target: target, whole: whole}
	m.back = m.mode
	return m.prompt(modeRewindPoint, "")
}

// planRewind reads the point typed and starts the rewind's dry run.
func (m *Model) planRewind(point string, now time.Time) tea.Cmd {
	p := m.rewind
	if point == "" {
		m.rewind = nil
		return nil
	}
	seq, at, err := parsePoint(point, now)
	if err != nil {
		m.rewind = nil
		m.say(true, "rewind to %s: %v", printable(point), err)
		return nil
	}
	p.point, p.opts = point, actions.RewindOptions{ToSeq: seq, ToTime: at, DryRun: true}
	m.busy = fmt.Sprintf("checking what a rewind of %s to %s would do", rewindTargetText(p), printable(point))
	b := m.backend
	return func() tea.Msg {
		out, err := b.Rewind(p.target, p.opts)
		p.out = out
		return rewindPlannedMsg{plan: p, err: err}
	}
}

func (m *Model) rewindPlanned(msg rewindPlannedMsg) {
	m.busy = ""
	p := msg.plan
	switch {
	case msg.err != nil:
		m.rewind = nil
		m.say(true, "rewind %s to %s: %s", rewindTargetText(p), printable(p.point), oneLine(msg.err))
	case p.out.Changed == 0:
		m.rewind = nil
		m.say(false, "nothing to rewind: %s delivered nothing at or after seq %d", rewindTargetText(p), p.out.Seq)
	default:
		m.back, m.mode = m.mode, modeRewind
	}
}

func (m *Model) rewinding(k tea.KeyMsg) tea.Cmd {
	p := m.rewind
	switch k.String() {
	case "y", "Y":
		m.rewind, m.mode = nil, m.back
		m.busy = fmt.Sprintf("rewinding %s to seq %d (pausing, draining, resetting, resuming)", rewindTargetText(p), p.out.Seq)
		b, o := m.backend, p.opts
		o.DryRun = false
		// The point is the sequence the dry run found: a time typed
		// would be resolved again, and the confirmation named this one.
		o.ToSeq, o.ToTime = p.out.Seq, time.Time{}
		return func() tea.Msg {
			out, err := b.Rewind(p.target, o)
			return rewoundMsg{plan: p, out: out, err: err}
		}
	case "n", "N", "esc", "q":
		m.rewind, m.mode = nil, m.back
		m.say(false, "rewind cancelled: nothing changed")
	}
	return nil
}

func (m *Model) rewound(msg rewoundMsg) {
	m.busy = ""
	p := msg.plan
	if msg.err != nil {
		m.say(true, "rewind %s to seq %d: %s", rewindTargetText(p), p.out.Seq, oneLine(msg.err))
		return
	}
	o := msg.out
	var names []string
	for _, l := range o.Lanes {
		if l.Changed {
			names = append(names, l.Lane)
		}
	}
	text := fmt.Sprintf("rewind: %s rewound to seq %d", plural(o.Changed, "lane"), o.Seq)
	if len(names) <= 3 {
		text += " (" + printable(strings.Join(names, ", ")) + ")"
	}
	m.say(false, "%s; %s run again; the next refresh shows it", text, againText(o.Again))
}

func rewindTargetText(p *rewindPlan) string {
	if p.whole {
		return "every lane of design " + printable(p.target.Design)
	}
	return "lane " + printable(strings.Join(p.target.Lanes, ", "))
}

func againText(n int64) string {
	if n < 0 {
		return "an unknown number of messages (the stream allows no direct gets to count them)"
	}
	if n == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", n)
}

// parsePoint reads a rewind's point as lanes rewind takes it: a stream
// sequence (--to-seq), or a time in the past (--to-time): RFC 3339, a
// clock time today in local time (13:55, 13:55:05), or a duration ago
// (15m, "15m ago").
func parsePoint(s string, now time.Time) (uint64, time.Time, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n == 0 {
			return 0, time.Time{}, errors.New("stream sequences start at 1")
		}
		return n, time.Time{}, nil
	}
	t, err := actions.ParseSince(s, now)
	if err != nil && t.IsZero() {
		return 0, time.Time{}, errors.New("not a point: give a stream sequence (1042), a time today (13:55), a duration ago (15m) or an RFC 3339 time")
	}
	if err != nil {
		return 0, time.Time{}, err
	}
	return 0, t, nil
}

// skipConfirmation states what the skip will do, from its dry run: the
// message, how it is settled, who settles it; and asks.
func (m *Model) skipConfirmation() []string {
	p, s := m.skip, m.cfg.Styles
	o := p.term
	label := func(t string) string { return s.Label.Render(fmt.Sprintf("%-10s", t)) }
	attempts := "not known (it is not out now)"
	if o.Attempts > 0 {
		attempts = strconv.Itoa(o.Attempts)
	}
	serial := "serial lane: the lane's head"
	if o.KeyParallel {
		serial = "key-parallel lane: its key's first waiting message"
	}
	out := []string{
		s.Heading.Render(fmt.Sprintf("Skip seq %d of lane %s (stream %s)?", p.seq, printable(o.Lane), printable(o.Stream))),
		"",
		label("message") + fmt.Sprintf("seq %d, subject %s, key %s (%s)", o.Seq, printable(o.Subject), printable(o.Key), serial),
		label("") + fmt.Sprintf("stored %s, age %s, attempts %s", o.Stored.Format("2006-01-02 15:04:05 MST"), printable(o.Age), attempts),
	}
	mark := func(on bool) string {
		if on {
			return "(*) "
		}
		return "( ) "
	}
	out = append(out, label("how")+mark(!p.parking)+"t: terminate it (+TERM): it is never run, and the key's next message runs after it")
	if p.park != nil {
		out = append(out, label("")+mark(p.parking)+fmt.Sprintf("p: park it on %s with its Lanes-Parked-* headers (lanes parked replay can run it later)", printable(p.park.DeadLetter)))
	} else {
		out = append(out, label("")+s.Dim.Render("( ) p: park it: not possible: "+oneLine(p.parkErr)))
	}
	c := p.chosen()
	if c == nil {
		return append(out, "", s.Bad.Render("Parking is not possible here: t to terminate it, n to cancel"))
	}
	who := printable(c.SettledBy)
	if c.RunningOn != "" && c.SettledBy == c.RunningOn {
		who += fmt.Sprintf(", the lanes work instance serving the lane: it stops the message's handler and settles it (lanes top waits up to %s)", m.skipOptions(p, false).Wait)
	}
	out = append(out, label("done by")+who, label("asked by")+printable(m.cfg.By), "")
	how := map[bool]string{false: "terminate", true: "park"}[p.parking]
	return append(out, s.Warn.Render(fmt.Sprintf("y: %s seq %d   t/p: terminate/park   n: cancel", how, p.seq)))
}

// rewindConfirmation states what the rewind will do, lane by lane, from
// its dry run: each lane's position now and after, and how many of its
// messages run again; and asks.
func (m *Model) rewindConfirmation(room int) []string {
	p, s := m.rewind, m.cfg.Styles
	o := p.out
	point := fmt.Sprintf("seq %d", o.Seq)
	if o.Time != nil {
		point = fmt.Sprintf("%s (seq %d, the first message stored since)", o.Time.Local().Format("2006-01-02 15:04:05"), o.Seq)
	}
	out := []string{
		s.Heading.Render(fmt.Sprintf("Rewind %s of stream %s to %s?", rewindTargetText(p), printable(o.Stream), point)),
		"",
		fmt.Sprintf("It rewinds %s; %s run again (by %s):", plural(o.Changed, "lane"), againText(o.Again), printable(m.cfg.By)),
	}
	shown, most := 0, max(room-8, 2)
	for _, l := range o.Lanes {
		if shown == most {
			out = append(out, fmt.Sprintf("  ... and %d more lanes", len(o.Lanes)-shown))
			break
		}
		now := fmt.Sprintf("ack floor %d, delivered %d", l.AckFloor, l.Delivered)
		line := fmt.Sprintf("  %s: %s -> ", printable(l.Lane), now)
		if l.Changed {
			line += fmt.Sprintf("restarts at seq %d (ack floor %d), %s again", l.To, l.To-1, againText(l.Again))
		} else {
			line += "as it is"
		}
		if l.Note != "" {
			line += " (" + printable(l.Note) + ")"
		}
		out = append(out, line)
		shown++
	}
	return append(out, "",
		"The lanes are paused; their workers finish what they hold (up to 30s); then each lane is reset and resumed:",
		"each key's messages from the point on run again, in order. A lane paused by an operator stays paused.",
		"", s.Warn.Render(fmt.Sprintf("y: rewind %s   n: cancel", plural(o.Changed, "lane"))))
}
