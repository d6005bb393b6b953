package top

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

// View draws the screen: a header, the summary, the lane list (or a lane
// in depth, the confirmation, the keys), the findings, a status line and
// the keys of the moment. Every line is cut to the terminal's width and
// only the rows on screen are drawn.
func (m *Model) View() string {
	if m.width <= 0 || m.height <= 0 {
		return ""
	}
	top := []string{m.header()}
	if m.problem != "" {
		top = append(top, m.cfg.Styles.Bad.Render(m.problem))
	}
	if m.report == nil {
		top = append(top, "", m.cfg.Styles.Dim.Render(fmt.Sprintf("reading the lanes of stream %s ...", printable(m.cfg.Stream))))
		return m.frame(top, nil, nil)
	}
	// A small terminal keeps the list and the status; the keys (?) take
	// the summary's room.
	small := m.height < 16
	if !small && m.mode != modeHelp {
		top = append(top, m.summary()...)
	}
	md := m.mode
	if md == modeRewindPoint {
		md = m.back // the point is typed under what was on screen
	}
	var bottom []string
	if md == modeList || md == modeFindings || md == modeFilter || md == modeLocate {
		if !small {
			bottom = m.findings()
		}
	}
	bottom = append(bottom, m.statusLine(), m.keysLine())
	room := m.height - len(top) - len(bottom)
	var body []string
	switch md {
	case modeHelp:
		body = m.help()
	case modeConfirm:
		body = m.confirmation()
	case modeSkip:
		body = m.skipConfirmation()
	case modeRewind:
		body = m.rewindConfirmation(room)
	case modeDetail:
		body = m.detailLines(room)
	default:
		body = m.table(room)
	}
	return m.frame(top, body, bottom)
}

// frame stacks the parts into exactly the screen's height and width.
func (m *Model) frame(top, body, bottom []string) string {
	room := max(m.height-len(top)-len(bottom), 0)
	if len(body) > room {
		body = body[:room]
	}
	lines := make([]string, 0, m.height)
	lines = append(lines, top...)
	lines = append(lines, body...)
	for len(lines)+len(bottom) < m.height {
		lines = append(lines, "")
	}
	lines = append(lines, bottom...)
	if len(lines) > m.height {
		lines = lines[len(lines)-m.height:] // the status and keys stay
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, m.width, "…")
	}
	return strings.Join(lines, "\n")
}

// listRows is how many lane rows fit on screen.
func (m *Model) listRows() int {
	fixed := 4 // header, table header, status, keys
	if m.problem != "" {
		fixed++
	}
	if m.height >= 16 && m.report != nil {
		fixed += len(m.summary()) + len(m.findings())
	}
	return max(m.height-fixed, 1)
}

func (m *Model) header() string {
	s := m.cfg.Styles
	line := s.Heading.Render("lanes top") + "  stream " + s.Heading.Render(printable(m.cfg.Stream))
	if m.cfg.Design != "" {
		line += "  design " + printable(m.cfg.Design)
	}
	line += "  " + printable(m.cfg.Server) + "  every " + m.cfg.Every.String()
	if !m.at.IsZero() {
		line += "  " + m.at.Format("15:04:05")
	}
	return line
}

// summary: the stream, its mappings, the generations (and a repartition
// in progress), the lanes' totals and the workers.
func (m *Model) summary() []string {
	r, s := m.report, m.cfg.Styles
	label := func(l string) string { return s.Label.Render(fmt.Sprintf("%-12s", l)) }
	out := []string{label("stream") + fmt.Sprintf("%s: last seq %d, %d messages, %d consumers", printable(r.Stream), r.LastSeq, r.Messages, r.Consumers)}
	for i, lay := range r.Layouts {
		if i == 2 {
			out = append(out, label("")+fmt.Sprintf("... %d mappings in all", len(r.Layouts)))
			break
		}
		where := map[string]string{"design": "design file", "stream": "stream subject transform", "lanes": "lane metadata"}[lay.Origin]
		if lay.Current {
			where += ", current"
		}
		out = append(out, label("mapping")+fmt.Sprintf("%s -> %s (%s)", printable(lay.Source), printable(lay.Destination), where))
	}
	out = append(out, label("generations")+m.generations())
	sm := r.Summary
	lanes := fmt.Sprintf("%d answering, %d at their cap, %d paused", sm.Lanes, sm.AtCap, sm.Paused)
	if sm.Unavailable > 0 {
		lanes += ", " + s.Bad.Render(fmt.Sprintf("%d unavailable", sm.Unavailable))
	}
	lanes += fmt.Sprintf("; backlog %d", sm.TotalBacklog)
	if sm.Hottest != "" {
		lanes += fmt.Sprintf(" (max %d on %s, max/mean %.2f)", sm.MaxBacklog, printable(sm.Hottest), sm.MaxToMean)
	}
	out = append(out, label("lanes")+lanes)
	if r.WorkersUnknown != "" {
		out = append(out, label("workers")+s.Warn.Render("unknown: "+printable(r.WorkersUnknown)))
	}
	for i, w := range r.Workers {
		if i == 2 {
			out = append(out, label("")+fmt.Sprintf("... %d designs in all", len(r.Workers)))
			break
		}
		out = append(out, label("workers")+workersText(w))
	}
	return out
}

// generations: "n8 current (8 lanes)", and during a repartition the old
// one draining and the lanes lanes apply holds.
func (m *Model) generations() string {
	r := m.report
	count := map[int]int{}
	backlog := map[int]uint64{}
	held := 0
	for _, l := range r.Lanes {
		count[l.Partitions]++
		backlog[l.Partitions] += l.Backlog
		if l.Held != "" {
			held++
		}
	}
	current := map[int]bool{}
	for _, lay := range r.Layouts {
		if lay.Current {
			current[lay.Partitions] = true
		}
	}
	ns := make([]int, 0, len(count))
	for n := range count {
		ns = append(ns, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ns)))
	var parts []string
	for _, n := range ns {
		what := "draining"
		if current[n] {
			what = "current"
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s, backlog %d)", planner.Generation(n), what, plural(count[n], "lane"), backlog[n]))
	}
	text := strings.Join(parts, ", ")
	if len(ns) > 1 || held > 0 {
		text += "; " + m.cfg.Styles.Warn.Render(fmt.Sprintf("repartition in progress (%d lanes held by lanes apply)", held))
	}
	if text == "" {
		return "none"
	}
	return text
}

func workersText(w health.Workers) string {
	names := func(ms []string) string {
		if len(ms) > 3 {
			ms = append(ms[:3:3], fmt.Sprintf("%d more", len(ms)-3))
		}
		return strings.Join(ms, ", ")
	}
	var live, gone []string
	for _, x := range w.Live {
		live = append(live, printable(x.Instance))
	}
	for _, x := range w.Gone {
		how := "stopped"
		if x.Expired {
			how = "lease expired"
		}
		gone = append(gone, printable(x.Instance)+" "+how)
	}
	text := fmt.Sprintf("%s: %d live", printable(w.Design), len(live))
	if len(live) > 0 {
		text += " (" + names(live) + ")"
	}
	if len(gone) > 0 {
		text += fmt.Sprintf(", %d gone in the last hour (%s)", len(gone), names(gone))
	}
	var parked uint64
	for _, p := range w.Parked {
		parked += p.Count
	}
	if parked > 0 {
		text += fmt.Sprintf(", %d parked", parked)
	}
	return text
}

// table draws the header and the rows on screen, n lines in all.
func (m *Model) table(n int) []string {
	s := m.cfg.Styles
	lanes := m.report.Lanes
	nameWidth := 4
	for _, i := range m.rows[m.offset:min(m.offset+max(n-1, 0), len(m.rows))] {
		nameWidth = max(nameWidth, ansi.StringWidth(printable(lanes[i].Name)))
	}
	nameWidth = min(nameWidth, 40)
	width := func(c column) int {
		if c.width == 0 {
			return nameWidth
		}
		return c.width
	}
	var head strings.Builder
	head.WriteString("  ")
	for ci, c := range columns {
		h := c.header
		if ci == m.sortCol {
			h += map[bool]string{true: "↓", false: "↑"}[m.desc]
		}
		head.WriteString(cell(h, width(c), c.right) + " ")
	}
	out := []string{s.Heading.Render(strings.TrimRight(head.String(), " "))}
	if len(m.rows) == 0 {
		what := "no lanes"
		if m.filterOn != "" {
			what = "no lane matches the filter " + planner.Quote(m.filterOn, 100) + " (esc clears it)"
		}
		return append(out, s.Dim.Render("  "+what))
	}
	for r := m.offset; r < len(m.rows) && len(out) < n; r++ {
		l := &lanes[m.rows[r]]
		var b strings.Builder
		if r == m.cursor {
			b.WriteString("> ")
		} else {
			b.WriteString("  ")
		}
		for _, c := range columns {
			text := cell(c.cell(m, l), width(c), c.right)
			switch c.header {
			case "STATE":
				text = m.stateStyle(l, text)
			case "FINDING":
				text = m.severityStyle(m.worst(l.Name), text)
			}
			b.WriteString(text + " ")
		}
		line := strings.TrimRight(b.String(), " ")
		if r == m.cursor {
			line = s.Heading.Render(line)
		}
		out = append(out, line)
	}
	return out
}

// cell pads or cuts text to width cells.
func cell(text string, width int, right bool) string {
	text = printable(text)
	w := ansi.StringWidth(text)
	switch {
	case w > width:
		return ansi.Truncate(text, width, "…")
	case right:
		return strings.Repeat(" ", width-w) + text
	}
	return text + strings.Repeat(" ", width-w)
}

func (m *Model) stateStyle(l *health.Lane, text string) string {
	s := m.cfg.Styles
	switch state(l) {
	case "ok":
		return text
	case "paused", "held":
		return s.Warn.Render(text)
	}
	return s.Bad.Render(text)
}

func (m *Model) severityStyle(sev int, text string) string {
	s := m.cfg.Styles
	switch health.Severity(sev) {
	case health.Critical:
		return s.Bad.Render(text)
	case health.Warning:
		return s.Warn.Render(text)
	}
	return text
}

// worst is the highest severity of the lane's findings, -1 for none.
func (m *Model) worst(lane string) int {
	fs := m.byLane[lane]
	if len(fs) == 0 {
		return -1
	}
	return int(m.report.Findings[fs[0]].Severity) // findings come sorted, the worst first
}

// findingText is the lane's worst finding, and how many more it has.
func (m *Model) findingText(lane string) string {
	fs := m.byLane[lane]
	if len(fs) == 0 {
		return ""
	}
	f := m.report.Findings[fs[0]]
	text := severityWord(f.Severity) + " " + f.Code
	if len(fs) > 1 {
		text += fmt.Sprintf(" +%d", len(fs)-1)
	}
	return text
}

func severityWord(s health.Severity) string {
	return map[health.Severity]string{health.Critical: "CRIT", health.Warning: "WARN", health.Info: "info"}[s]
}

// findingsShown bounds the findings pane under the list.
const findingsShown = 4

// findings is the pane under the list: the findings, worst first, each
// with its lane and advice; in focus (tab), the one under the cursor.
func (m *Model) findings() []string {
	r, s := m.report, m.cfg.Styles
	if len(r.Findings) == 0 {
		return []string{s.Good.Render("No findings: the lanes look healthy.")}
	}
	sm := r.Summary
	title := fmt.Sprintf("Findings: %d critical, %d warning, %d info", sm.Critical, sm.Warnings, sm.Infos)
	if m.mode == modeFindings {
		title += "  (↑↓ choose, enter: its lane, tab: back)"
	} else {
		title += "  (tab to choose one)"
	}
	out := []string{s.Heading.Render(title)}
	first := 0
	if m.mode == modeFindings {
		first = max(m.findCursor-findingsShown+1, 0)
	}
	for i := first; i < len(r.Findings) && i < first+findingsShown; i++ {
		f := r.Findings[i]
		mark := "  "
		if m.mode == modeFindings && i == m.findCursor {
			mark = "> "
		}
		where := ""
		if f.Lane != "" {
			where = " " + printable(f.Lane)
		}
		line := mark + m.severityStyle(int(f.Severity), fmt.Sprintf("%-4s", severityWord(f.Severity))) + " " + f.Code + where + ": " +
			planner.Printable(f.Message, 2000) + s.Dim.Render(" -> "+planner.Printable(f.Advice, 2000))
		out = append(out, line)
	}
	if more := len(r.Findings) - first - findingsShown; more > 0 {
		out = append(out, s.Dim.Render(fmt.Sprintf("  ... %d more", more)))
	}
	return out
}

func (m *Model) statusLine() string {
	s := m.cfg.Styles
	switch {
	case m.mode == modeFilter:
		return "filter: " + m.input.View()
	case m.mode == modeLocate:
		return "key or subject: " + m.input.View()
	case m.mode == modeRewindPoint && m.rewind != nil:
		return "rewind " + rewindTargetText(m.rewind) + " to (a stream sequence, 13:55, 15m ago): " + m.input.View()
	case m.busy != "":
		return s.Dim.Render(m.busy + " ...")
	case m.status != "" && m.level == levelBad:
		return s.Bad.Render(m.status)
	case m.status != "" && m.level == levelWarn:
		return s.Warn.Render(m.status)
	case m.status != "":
		return s.Good.Render(m.status)
	}
	if m.report == nil {
		return ""
	}
	text := fmt.Sprintf("%d of %d lanes", len(m.rows), len(m.report.Lanes))
	if m.filterOn != "" {
		text += " match " + planner.Quote(m.filterOn, 100)
	}
	return s.Dim.Render(text)
}

func (m *Model) keysLine() string {
	var text string
	switch m.mode {
	case modeFilter:
		text = "enter: keep the filter  esc: as it was"
	case modeLocate:
		text = "enter: find the lane  esc: cancel"
	case modeConfirm, modeRewind:
		text = "y: do it  n or esc: cancel"
	case modeSkip:
		text = "t: terminate it  p: park it  y: do it  n or esc: cancel"
	case modeRewindPoint:
		text = "enter: see what it would do (nothing changes yet)  esc: cancel"
	case modeHelp:
		text = "any key: back"
	case modeDetail:
		text = "esc: back  ↑↓: the next lane  p/u: pause/resume it  P/U: its design  x: skip its head  r/R: rewind it/its design  ?: keys  q: quit"
	default:
		text = "↑↓ move  enter: lane  /: filter  l: key  s/S: sort  tab: findings  p/u: pause/resume lane  P/U: design  ?: keys  q: quit"
	}
	return m.cfg.Styles.Dim.Render(text)
}

func (m *Model) help() []string {
	s := m.cfg.Styles
	out := []string{s.Heading.Render("Keys"), ""}
	for _, b := range []key.Binding{keys.Up, keys.Down, keys.PageUp, keys.PageDown, keys.Top, keys.Bottom, keys.Enter, keys.Back,
		keys.Filter, keys.Locate, keys.Sort, keys.Reverse, keys.Findings, keys.Help, keys.Quit} {
		h := b.Help()
		out = append(out, fmt.Sprintf("  %-7s %s", h.Key, h.Desc))
	}
	out = append(out, "", s.Heading.Render("Actions")+" (each asks first, saying what will change)", "")
	for _, a := range Actions {
		what := "the selected lane"
		if a.Whole {
			what = "every lane of its design (the current generation)"
		}
		out = append(out, fmt.Sprintf("  %-7s %s %s", a.Key, a.Name, what))
	}
	for _, b := range []key.Binding{keys.Skip, keys.Rewind, keys.RewindAll} {
		h := b.Help()
		out = append(out, fmt.Sprintf("  %-7s %s", h.Key, h.Desc))
	}
	return out
}

// confirmation states what the action will do, lane by lane, from its
// dry run, and asks.
func (m *Model) confirmation() []string {
	p, s := m.pending, m.cfg.Styles
	out := []string{
		s.Heading.Render(fmt.Sprintf("%s %s of stream %s?", capital(p.a.Name), targetText(p.a, p.target), printable(p.target.Stream))),
		"",
		fmt.Sprintf("It changes %s (by %s):", plural(p.out.Changed, "lane"), printable(m.cfg.By)),
	}
	shown, room := 0, max(m.height-12, 3)
	for _, c := range p.out.Lanes {
		if !c.Changed {
			continue
		}
		if shown == room {
			out = append(out, fmt.Sprintf("  ... and %d more", p.out.Changed-shown))
			break
		}
		out = append(out, fmt.Sprintf("  %s: %s -> %s", printable(c.Lane), printable(c.Before), printable(c.After)))
		shown++
	}
	if same := len(p.out.Lanes) - p.out.Changed; same > 0 {
		out = append(out, fmt.Sprintf("  (%s already %s: left as they are)", plural(same, "lane"), doneWord(p.a.Name)))
	}
	out = append(out, "", p.a.Effect, "", s.Warn.Render(fmt.Sprintf("y: %s %s   n: cancel", p.a.Name, plural(p.out.Changed, "lane"))))
	return out
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// detailLines: the lane in depth, in room lines (the parked messages
// take what is left).
func (m *Model) detailLines(room int) []string {
	l, s := m.lane(), m.cfg.Styles
	if l == nil {
		return []string{"no lane"}
	}
	label := func(t string) string { return s.Label.Render(fmt.Sprintf("%-10s", t)) }
	design := printable(l.Design)
	if design == "" {
		design = "none (not created by lanes)"
	}
	out := []string{s.Heading.Render("Lane "+printable(l.Name)) + fmt.Sprintf("  design %s, partition %d of %d (%s)", design, l.Partition, l.Partitions, l.Generation())}
	for _, p := range m.places {
		out = append(out, label("key")+fmt.Sprintf("%s (key %s): partition %d of %s, stored as %s, lanes %s",
			printable(p.Subject), printable(p.Key), p.Partition, printable(p.Layout.Destination), printable(p.Stored), printable(strings.Join(p.Lanes, ", "))))
	}
	out = append(out, m.keyPosLines(label)...)
	keysInFlight := "serial (1 key at a time)"
	if l.KeyParallel() {
		keysInFlight = fmt.Sprintf("%d keys in flight", l.KeysInFlight)
	}
	out = append(out,
		label("config")+fmt.Sprintf("filter %s, ack %s, ack wait %s, max deliver %d, max ack pending %d, %s", printable(l.Filter), l.AckPolicy, l.AckWait, l.MaxDeliver, l.MaxAckPending, keysInFlight),
		label("state")+m.stateStyle(l, state(l))+pauseText(l)+leaderText(l),
	)
	if l.State != health.StateOK {
		out = append(out, label("reason")+printable(l.Reason))
		return append(out, m.laneFindings(l)...)
	}
	out = append(out,
		label("figures")+fmt.Sprintf("backlog %d, pending %d, in flight %d/%d, redelivered %d, waiting pulls %d, delivered seq %d, ack floor %d",
			l.Backlog, l.Pending, l.AckPending, l.MaxAckPending, l.Redelivered, l.Waiting, l.DeliveredSeq, l.AckFloorSeq),
		label("served by")+servedText(l)+runningText(l),
	)
	out = append(out, m.headLines(l, label)...)
	out = append(out, label("rates")+m.sparklines(l))
	if l.KeyParallel() {
		out = append(out, label("window")+windowText(l))
	}
	out = append(out, m.laneFindings(l)...)
	return append(out, m.parkedLines(l, label, room-len(out))...)
}

func pauseText(l *health.Lane) string {
	if !l.Paused {
		return ""
	}
	text := ", for another " + l.PauseRemaining.Round(1e9).String()
	if l.PauseRemaining > 50*365*24*3600*1e9 {
		text = ", until resumed"
	}
	if p := l.PausedBy; p != nil {
		text += " (by " + printable(p.By)
		if p.Reason != "" {
			text += ": " + printable(p.Reason)
		}
		text += ")"
	}
	if l.Held != "" {
		text += ", held by lanes apply for a " + printable(l.Held)
	}
	return text
}

func leaderText(l *health.Lane) string {
	if l.Leader == "" {
		return ""
	}
	return ", leader " + printable(l.Leader)
}

func runningText(l *health.Lane) string {
	srv := l.Server
	if srv == nil || srv.Gone {
		return ""
	}
	if o := srv.Outage; o != nil {
		return fmt.Sprintf("; handler outage: %d tries since %s: %s", o.Tries, o.Since.Format("15:04:05"), printable(o.Reason))
	}
	if in := srv.Running; in != nil {
		return fmt.Sprintf("; running seq %d (attempt %d) since %s", in.Seq, in.Attempt, in.Since.Format("15:04:05"))
	}
	return ""
}

// payloadShown bounds the payload on screen; it is escaped (planner.Printable).
const payloadShown = 300

func (m *Model) headLines(l *health.Lane, label func(string) string) []string {
	if l.Head == nil {
		if l.Backlog == 0 {
			return []string{label("head") + "none: nothing waits"}
		}
		return []string{label("head") + "not looked up"}
	}
	h := l.Head
	attempts := "-"
	if l.HeadDeliveries > 0 {
		attempts = strconv.Itoa(l.HeadDeliveries)
	}
	out := []string{label("head") + fmt.Sprintf("seq %d, subject %s, key %s, age %s, attempts %s",
		h.Seq, printable(h.Subject), printable(h.Key), render.OptDuration(l.Age()), attempts)}
	switch {
	case m.head == nil || m.head.lane != l.Name || m.head.seq != h.Seq:
		out = append(out, label("payload")+m.cfg.Styles.Dim.Render("(not read)"))
	case m.head.err != nil:
		out = append(out, label("payload")+m.cfg.Styles.Bad.Render("cannot read it: "+oneLine(m.head.err)))
	case m.head.msg == nil:
		out = append(out, label("payload")+m.cfg.Styles.Dim.Render("reading ..."))
	default:
		msg := m.head.msg
		if len(msg.Header) > 0 {
			names := make([]string, 0, len(msg.Header))
			for k := range msg.Header {
				names = append(names, k)
			}
			sort.Strings(names)
			var hs []string
			for _, k := range names {
				hs = append(hs, printable(k)+": "+planner.Printable(strings.Join(msg.Header.Values(k), ","), 100))
			}
			out = append(out, label("headers")+strings.Join(hs, "; "))
		}
		out = append(out, label("payload")+fmt.Sprintf("%d bytes: %s", len(msg.Data), planner.Printable(string(msg.Data), payloadShown)))
	}
	return out
}

// sparklines draw the lane's recent delivered and acked rates.
func (m *Model) sparklines(l *health.Lane) string {
	h := m.hist[l.Name]
	if h == nil || len(h.ack) == 0 {
		return "after the next refresh"
	}
	return fmt.Sprintf("deliv/s %s %s   ack/s %s %s   (last %d refreshes)",
		spark(h.deliv), render.RateText(l.DeliveredRate), spark(h.ack), render.RateText(l.AckedRate), len(h.ack))
}

var sparkBars = []rune("▁▂▃▄▅▆▇█")

// spark draws values as bars scaled to their maximum.
func spark(vs []float64) string {
	top := 0.0
	for _, v := range vs {
		top = max(top, v)
	}
	out := make([]rune, len(vs))
	for i, v := range vs {
		b := 0
		if top > 0 {
			b = int(v / top * float64(len(sparkBars)-1))
		}
		out[i] = sparkBars[b]
	}
	return string(out)
}

// windowText: a key-parallel lane's window, as its worker records it.
func windowText(l *health.Lane) string {
	w := l.Window()
	if w == nil {
		return fmt.Sprintf("%d keys in flight; no record from a live worker", l.KeysInFlight)
	}
	text := fmt.Sprintf("%d of %d held, %d distinct keys, %d running", w.Held, w.Size, w.Keys, w.RunningCount)
	if len(w.Running) > 0 {
		var ks []string
		for _, k := range w.Running {
			ks = append(ks, planner.Printable(k, 40))
		}
		text += " (" + strings.Join(ks, ", ") + ")"
	}
	if o, d, ok := l.OldestWaiting(); ok {
		text += fmt.Sprintf("; oldest waiting: key %s seq %d for %s", planner.Printable(o.Key, 40), o.Seq, render.ShortDuration(d))
	}
	if w.Holder != "" {
		text += "; key " + planner.Printable(w.Holder, 40) + " holds the whole window"
	}
	return text
}

func (m *Model) laneFindings(l *health.Lane) []string {
	var out []string
	for _, i := range m.byLane[l.Name] {
		f := m.report.Findings[i]
		out = append(out, m.severityStyle(int(f.Severity), fmt.Sprintf("%-10s", severityWord(f.Severity)))+f.Code+": "+planner.Printable(f.Message, 2000),
			fmt.Sprintf("%-10s", "")+m.cfg.Styles.Dim.Render("-> "+planner.Printable(f.Advice, 2000)))
	}
	return out
}
