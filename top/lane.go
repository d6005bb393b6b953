package top

import (
	"errors"
	"fmt"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

// The lane view's parts read on demand, besides the head: the lane's
// parked messages, and after a key lookup, the key's last message.

// parkedPane is the shown lane's parked messages, read when the lane
// view opens and at each refresh (one read at a time: the last answer
// stays on screen while the next is read).
type parkedPane struct {
	lane    string
	parked  *actions.Parked
	err     error
	reading bool
}

type parkedMsg struct {
	lane   string
	parked *actions.Parked
	err    error
}

// readLane reads what the lane view shows besides the report: the head
// message and the parked messages.
func (m *Model) readLane() tea.Cmd {
	return tea.Batch(m.readHead(), m.readParked())
}

// readParked reads the shown lane's parked messages, unless a read of
// them is under way.
func (m *Model) readParked() tea.Cmd {
	l := m.lane()
	if l == nil || m.backend == nil || l.Design == "" {
		m.parked = nil
		return nil
	}
	if m.parked == nil || m.parked.lane != l.Name {
		m.parked = &parkedPane{lane: l.Name}
	}
	if m.parked.reading {
		return nil
	}
	m.parked.reading = true
	// The selection is the view's report and its lane: reports are not
	// changed once made, so the read may use it while the view goes on.
	sel := &actions.Selection{Report: m.report, Lanes: []*health.Lane{l}}
	b, name := m.backend, l.Name
	return func() tea.Msg {
		p, err := b.Parked(sel)
		return parkedMsg{lane: name, parked: p, err: err}
	}
}

func (m *Model) parkedRead(msg parkedMsg) {
	if m.parked == nil || m.parked.lane != msg.lane {
		return // another lane is shown now
	}
	m.parked.reading = false
	m.parked.parked, m.parked.err = msg.parked, msg.err
}

// parkedLines: the lane's parked messages, newest last, at most room
// lines in all.
func (m *Model) parkedLines(l *health.Lane, label func(string) string, room int) []string {
	s := m.cfg.Styles
	pp := m.parked
	switch {
	case pp == nil || pp.lane != l.Name:
		return nil
	case pp.parked == nil && pp.err == nil:
		return []string{label("parked") + s.Dim.Render("reading ...")}
	case pp.err != nil:
		var in *actions.InputError
		if errors.As(pp.err, &in) {
			return []string{label("parked") + s.Dim.Render("none known: "+oneLine(pp.err))}
		}
		return []string{label("parked") + s.Bad.Render("cannot read them: "+oneLine(pp.err))}
	}
	p := pp.parked
	where := ""
	for i, dl := range p.DeadLetters {
		if i > 0 {
			where += ", "
		}
		where += fmt.Sprintf("%s (stream %s)", printable(dl.Subject), printable(dl.Stream))
	}
	if len(p.Messages) == 0 {
		return []string{label("parked") + "none from this lane on " + where}
	}
	out := []string{label("parked") + fmt.Sprintf("%s from this lane on %s:", plural(len(p.Messages), "message"), where)}
	room = max(room-1, 1)
	shown := p.Messages
	if len(shown) > room {
		shown = shown[len(shown)-(room-1):] // the newest
		out = append(out, fmt.Sprintf("%-10s... %d earlier (lanes parked list --lanes %s)", "", len(p.Messages)-len(shown), printable(l.Name)))
	}
	for _, pm := range shown {
		reason := planner.Printable(pm.Reason, 80)
		if pm.Error != "" {
			reason += ": " + planner.Printable(pm.Error, 120)
		}
		out = append(out, fmt.Sprintf("%-10sseq %d (was %d), key %s, %s, age %s: %s", "", pm.Seq, pm.OriginSeq, planner.Printable(pm.Key, 40),
			plural(pm.Attempts, "attempt"), render.ShortDuration(p.Time.Sub(pm.ParkedAt)), reason))
	}
	return out
}

// keyPos is a key's last message on one lane (the last-by-subject get
// of its stored subject), read after a key lookup.
type keyPos struct {
	place health.KeyPlace
	msg   *Message // nil: none stored (or not read yet)
	err   error
	read  bool
}

type keyPosMsg struct {
	stored string
	msg    *Message
	err    error
}

// readKeyPos reads the last message of each place the key goes to.
func (m *Model) readKeyPos(places []health.KeyPlace) tea.Cmd {
	m.keyPos = nil
	if m.backend == nil {
		return nil
	}
	var cmds []tea.Cmd
	for _, p := range places {
		if len(p.Lanes) == 0 {
			continue
		}
		m.keyPos = append(m.keyPos, &keyPos{place: p})
		b, stream, stored := m.backend, m.report.Stream, p.Stored
		cmds = append(cmds, func() tea.Msg {
			msg, err := b.Last(stream, stored)
			return keyPosMsg{stored: stored, msg: msg, err: err}
		})
	}
	return tea.Batch(cmds...)
}

func (m *Model) keyPosRead(msg keyPosMsg) {
	for _, k := range m.keyPos {
		if k.place.Stored == msg.stored {
			k.msg, k.err, k.read = msg.msg, msg.err, true
		}
	}
}

// keyPosLines: for each lane the key goes to, its last message there and
// whether the lane is done with it (at or below its ack floor) or it
// still waits, beside the lane's head.
func (m *Model) keyPosLines(label func(string) string) []string {
	s := m.cfg.Styles
	var out []string
	for _, k := range m.keyPos {
		for _, name := range k.place.Lanes {
			head := label("last") + "lane " + printable(name) + ": "
			l := m.report.Lane(name)
			switch {
			case !k.read:
				out = append(out, head+s.Dim.Render("reading ..."))
			case k.err != nil:
				out = append(out, head+s.Bad.Render("cannot read the key's last message: "+oneLine(k.err)))
			case k.msg == nil:
				out = append(out, head+"no message of the key is stored on "+printable(k.place.Stored))
			case l == nil || l.State != health.StateOK:
				out = append(out, head+fmt.Sprintf("seq %d, stored %s; the lane's position is unknown", k.msg.Seq, k.msg.Time.Format("15:04:05")))
			default:
				out = append(out, head+fmt.Sprintf("seq %d, stored %s: %s", k.msg.Seq, k.msg.Time.Format("15:04:05"), m.posText(l, k.msg.Seq)))
			}
		}
	}
	return out
}

// posText says where a message stands on its lane.
func (m *Model) posText(l *health.Lane, seq uint64) string {
	s := m.cfg.Styles
	if seq <= l.AckFloorSeq {
		return s.Good.Render("done") + fmt.Sprintf(" (the ack floor is seq %d)", l.AckFloorSeq)
	}
	text := s.Warn.Render("waiting") + fmt.Sprintf(" (the ack floor is seq %d)", l.AckFloorSeq)
	switch {
	case l.Head != nil && l.Head.Seq == seq:
		text += "; it is the lane's head"
	case l.Head != nil:
		text += fmt.Sprintf("; the head is seq %d, key %s", l.Head.Seq, planner.Printable(l.Head.Key, 40))
	}
	return text
}
