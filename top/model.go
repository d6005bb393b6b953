package top

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

// Config is what the view shows besides the reports.
type Config struct {
	Stream string
	Design string
	Server string // redacted (connect.Conn.Server): never a password
	Every  time.Duration
	By     string // who acts
	Styles render.Styles
	// SkipWait is how long a skip waits for the serving instance to
	// settle the message (0: 30s, as lanes skip --wait).
	SkipWait time.Duration
}

// TurnMsg is one refresh: a report, or why there is none this time
// (health.Watch's turn).
type TurnMsg health.Turn

type headMsg struct {
	lane string
	seq  uint64
	msg  *Message
	err  error
}

// plannedMsg is an action's dry run: what the confirmation shows.
type plannedMsg struct {
	a      *Action
	target actions.Target
	out    *actions.Outcome
	err    error
}

// actedMsg is an action's outcome.
type actedMsg plannedMsg

type mode int

const (
	modeList mode = iota
	modeDetail
	modeFindings
	modeFilter
	modeLocate
	modeConfirm
	modeHelp
	modeSkip        // a skip's confirmation: term or park, then y or n
	modeRewindPoint // typing the point to rewind to
	modeRewind      // a rewind's confirmation
)

// historyLen is how many refreshes a lane's sparkline shows.
const historyLen = 30

type history struct{ deliv, ack []float64 }

// head is the drill-down's head message, read on demand.
type head struct {
	lane string
	seq  uint64
	msg  *Message
	err  error
}

// Model is the view's state. It is driven by messages only (Update) and
// drawn by View; every read and action goes through the Backend as a
// command, so the view never waits on the server.
type Model struct {
	cfg     Config
	backend Backend
	width   int
	height  int

	report  *health.Report
	at      time.Time // when the last refresh came
	problem string    // why the figures are not fresh (a lost connection)
	fatal   error

	byLane map[string][]int // the findings of each lane (indices into report.Findings)
	hist   map[string]*history

	rows     []int // the lanes shown (indices into report.Lanes), filtered and sorted
	sortCol  int
	desc     bool
	filter   filter
	filterOn string
	cursor   int    // index into rows
	offset   int    // first row on screen
	selected string // the lane under the cursor, kept across refreshes

	mode       mode
	back       mode // where help returns to
	input      textinput.Model
	head       *head
	pending    *plannedMsg // awaiting y/n
	skip       *skipPlan   // awaiting its confirmation
	rewind     *rewindPlan // awaiting its point, then its confirmation
	busy       string      // an action under way
	status     string
	level      level
	places     []health.KeyPlace
	keyPos     []*keyPos // the looked-up key's last message, per place
	parked     *parkedPane
	findCursor int
}

// level is the status line's colour.
type level int

const (
	levelGood level = iota
	levelWarn
	levelBad
)

// New is the view before its first refresh; backend may be nil (no
// actions, no head messages).
func New(cfg Config, backend Backend) *Model {
	in := textinput.New()
	in.Prompt = ""
	in.CharLimit = 256
	in.Cursor.SetMode(cursor.CursorStatic) // no blink: a frame is the same each time it is drawn
	return &Model{cfg: cfg, backend: backend, width: 100, height: 30, sortCol: colFinding, desc: true,
		hist: map[string]*history{}, byLane: map[string][]int{}, input: in}
}

// Init: nothing to do until the first refresh.
func (m *Model) Init() tea.Cmd { return nil }

// keys of the view (bubbles key bindings, also for the help).
var keys = struct {
	Up, Down, PageUp, PageDown, Top, Bottom, Enter, Back, Filter, Locate, Sort, Reverse, Findings, Help, Quit, Skip, Rewind, RewindAll key.Binding
}{
	Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
	Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
	PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
	PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+f", " "), key.WithHelp("pgdn", "page down")),
	Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g", "first lane")),
	Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G", "last lane")),
	Enter:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "the lane in depth (the finding's lane, in findings)")),
	Back:     key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back; clears the filter in the list")),
	Filter:   key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter: words, or lane:, key:, state:, instance:")),
	Locate:   key.NewBinding(key.WithKeys("l"), key.WithHelp("l", "locate a key: which lane holds it")),
	Sort:     key.NewBinding(key.WithKeys("s", ">"), key.WithHelp("s", "sort by the next column")),
	Reverse:  key.NewBinding(key.WithKeys("S", "<"), key.WithHelp("S", "reverse the order")),
	Findings: key.NewBinding(key.WithKeys("tab", "f"), key.WithHelp("tab", "to the findings and back")),
	Help:     key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "these keys")),
	Quit:     key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit (also Ctrl-C)")),
	// Skip and rewind: the actions beside the table's (Actions).
	Skip:      key.NewBinding(key.WithKeys("x"), key.WithHelp("x", "skip the selected lane's head: terminate or park it, without running it")),
	Rewind:    key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "rewind the selected lane to a stream sequence or a time")),
	RewindAll: key.NewBinding(key.WithKeys("R"), key.WithHelp("R", "rewind every lane of its design (the current generation)")),
}

// Update handles one message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scroll()
	case TurnMsg:
		return m, m.turn(health.Turn(msg))
	case fatalMsg:
		m.fatal = msg.err
		return m, tea.Quit
	case headMsg:
		if m.head != nil && m.head.lane == msg.lane && m.head.seq == msg.seq {
			m.head.msg, m.head.err = msg.msg, msg.err
		}
	case plannedMsg:
		m.planned(msg)
	case actedMsg:
		m.acted(msg)
	case skipPlannedMsg:
		m.skipPlanned(msg)
	case skippedMsg:
		m.skipped(msg)
	case rewindPlannedMsg:
		m.rewindPlanned(msg)
	case rewoundMsg:
		m.rewound(msg)
	case parkedMsg:
		m.parkedRead(msg)
	case keyPosMsg:
		m.keyPosRead(msg)
	case tea.KeyMsg:
		return m, m.key(msg)
	}
	return m, nil
}

// turn takes a refresh: the new report, or the last one with the problem.
func (m *Model) turn(t health.Turn) tea.Cmd {
	m.at = t.At
	if t.Err != nil {
		m.problem = problemText(t.Err, m.cfg.Every)
		if t.Last != nil {
			m.problem += "; figures from " + t.Last.Time.Format("15:04:05")
		}
	} else {
		m.problem = ""
	}
	r := t.Report
	if r == nil {
		r = t.Last
	}
	if r == nil {
		return nil
	}
	if t.Report != nil {
		m.record(t.Report)
	}
	m.report = r
	m.byLane = make(map[string][]int, len(r.Findings))
	for i, f := range r.Findings {
		if f.Lane != "" {
			m.byLane[f.Lane] = append(m.byLane[f.Lane], i)
		}
	}
	m.findCursor = min(m.findCursor, max(len(r.Findings)-1, 0))
	m.filter = parseFilter(m.filterOn, r)
	m.relist()
	if m.mode == modeDetail {
		return m.readLane()
	}
	return nil
}

// record adds the report's rates to each lane's history.
func (m *Model) record(r *health.Report) {
	if r.Interval == 0 {
		return // the first report has no rates
	}
	for i := range r.Lanes {
		l := &r.Lanes[i]
		h := m.hist[l.Name]
		if h == nil {
			h = &history{deliv: make([]float64, 0, historyLen), ack: make([]float64, 0, historyLen)}
			m.hist[l.Name] = h
		}
		h.deliv = push(h.deliv, l.DeliveredRate)
		h.ack = push(h.ack, l.AckedRate)
	}
}

func push(s []float64, v float64) []float64 {
	if len(s) == historyLen {
		copy(s, s[1:])
		s = s[:len(s)-1]
	}
	return append(s, v)
}

// relist filters and sorts the lanes, keeping the cursor on its lane.
func (m *Model) relist() {
	m.rows = m.rows[:0]
	if m.report == nil {
		return
	}
	for i := range m.report.Lanes {
		if m.filter.empty() || m.filter.match(m, &m.report.Lanes[i]) {
			m.rows = append(m.rows, i)
		}
	}
	m.sortRows(m.rows, m.report.Lanes, m.sortCol, m.desc)
	m.cursor = 0
	for i, r := range m.rows {
		if m.report.Lanes[r].Name == m.selected {
			m.cursor = i
			break
		}
	}
	m.moved()
}

// moved keeps the cursor in range and on screen, and remembers its lane.
func (m *Model) moved() {
	m.cursor = max(min(m.cursor, len(m.rows)-1), 0)
	if l := m.lane(); l != nil {
		m.selected = l.Name
	}
	m.scroll()
}

func (m *Model) scroll() {
	n := m.listRows()
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+n {
		m.offset = m.cursor - n + 1
	}
	m.offset = max(min(m.offset, len(m.rows)-n), 0)
}

// lane is the lane under the cursor, or nil.
func (m *Model) lane() *health.Lane {
	if m.report == nil || m.cursor >= len(m.rows) {
		return nil
	}
	return &m.report.Lanes[m.rows[m.cursor]]
}

func (m *Model) key(k tea.KeyMsg) tea.Cmd {
	if k.Type == tea.KeyCtrlC {
		return tea.Quit
	}
	switch m.mode {
	case modeFilter, modeLocate, modeRewindPoint:
		return m.typing(k)
	case modeConfirm:
		return m.confirming(k)
	case modeSkip:
		return m.skipping(k)
	case modeRewind:
		return m.rewinding(k)
	case modeHelp:
		if key.Matches(k, keys.Quit) && k.String() == "q" {
			return tea.Quit
		}
		m.mode = m.back
		return nil
	}
	switch {
	case key.Matches(k, keys.Quit):
		return tea.Quit
	case key.Matches(k, keys.Help):
		m.back, m.mode = m.mode, modeHelp
		return nil
	}
	if m.mode == modeFindings {
		return m.findingsKey(k)
	}
	for _, a := range Actions {
		if k.String() == a.Key {
			return m.plan(a)
		}
	}
	switch {
	case key.Matches(k, keys.Skip):
		return m.planSkip()
	case key.Matches(k, keys.Rewind):
		return m.askRewind(false)
	case key.Matches(k, keys.RewindAll):
		return m.askRewind(true)
	}
	page := max(m.listRows()-1, 1)
	switch {
	case key.Matches(k, keys.Up):
		m.cursor--
	case key.Matches(k, keys.Down):
		m.cursor++
	case key.Matches(k, keys.PageUp):
		m.cursor -= page
	case key.Matches(k, keys.PageDown):
		m.cursor += page
	case key.Matches(k, keys.Top):
		m.cursor = 0
	case key.Matches(k, keys.Bottom):
		m.cursor = len(m.rows) - 1
	case key.Matches(k, keys.Enter):
		if m.mode == modeDetail {
			m.mode = modeList
			return nil
		}
		return m.detail()
	case key.Matches(k, keys.Back):
		switch {
		case m.mode == modeDetail:
			m.mode, m.places, m.keyPos = modeList, nil, nil
		case m.filterOn != "":
			m.setFilter("")
		}
		return nil
	case key.Matches(k, keys.Filter):
		return m.prompt(modeFilter, m.filterOn)
	case key.Matches(k, keys.Locate):
		return m.prompt(modeLocate, "")
	case key.Matches(k, keys.Sort):
		m.sortCol = (m.sortCol + 1) % len(columns)
		m.desc = columns[m.sortCol].right || m.sortCol == colFinding // numbers and findings: the largest first
		m.relist()
		return nil
	case key.Matches(k, keys.Reverse):
		m.desc = !m.desc
		m.relist()
		return nil
	case key.Matches(k, keys.Findings):
		if m.report != nil && len(m.report.Findings) > 0 {
			m.mode = modeFindings
		}
		return nil
	default:
		return nil
	}
	m.moved()
	if m.mode == modeDetail {
		return m.readLane() // the next lane, in depth
	}
	return nil
}

func (m *Model) findingsKey(k tea.KeyMsg) tea.Cmd {
	n := len(m.report.Findings)
	switch {
	case key.Matches(k, keys.Up):
		m.findCursor = max(m.findCursor-1, 0)
	case key.Matches(k, keys.Down):
		m.findCursor = min(m.findCursor+1, n-1)
	case key.Matches(k, keys.Findings), key.Matches(k, keys.Back):
		m.mode = modeList
	case key.Matches(k, keys.Enter):
		f := m.report.Findings[m.findCursor]
		if f.Lane == "" {
			m.say(false, "%s concerns the stream, not one lane", f.Code)
			return nil
		}
		return m.goTo(f.Lane)
	}
	return nil
}

// goTo puts the cursor on the named lane (clearing a filter that hides
// it) and shows it in depth.
func (m *Model) goTo(name string) tea.Cmd {
	if !m.show(name) {
		m.say(true, "lane %s is not in the last report", printable(name))
		m.mode = modeList
		return nil
	}
	return m.detail()
}

// show puts the cursor on the named lane, clearing a filter that hides it.
func (m *Model) show(name string) bool {
	if m.report == nil || m.report.Lane(name) == nil {
		return false
	}
	m.selected = name
	if !slices.ContainsFunc(m.rows, func(i int) bool { return m.report.Lanes[i].Name == name }) {
		m.setFilter("")
	}
	m.relist()
	return true
}

func (m *Model) setFilter(text string) {
	m.filterOn = strings.TrimSpace(text)
	m.filter = parseFilter(m.filterOn, m.report)
	m.relist()
}

func (m *Model) prompt(md mode, value string) tea.Cmd {
	m.mode = md
	m.input.SetValue(value)
	m.input.CursorEnd()
	return m.input.Focus()
}

// typing edits the filter (applied as it is typed) or the key to locate.
func (m *Model) typing(k tea.KeyMsg) tea.Cmd {
	switch k.Type {
	case tea.KeyEsc:
		m.input.Blur()
		switch m.mode {
		case modeFilter:
			m.setFilter(m.filterOn) // as it was before
		case modeRewindPoint:
			m.mode, m.rewind = m.back, nil
			return nil
		}
		m.mode = modeList
		return nil
	case tea.KeyEnter:
		m.input.Blur()
		value := strings.TrimSpace(m.input.Value())
		switch m.mode {
		case modeFilter:
			m.mode = modeList
			m.setFilter(value)
			return nil
		case modeRewindPoint:
			m.mode = m.back
			return m.planRewind(value, time.Now())
		}
		m.mode = modeList
		return m.locate(value)
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	if m.mode == modeFilter {
		m.filter = parseFilter(m.input.Value(), m.report)
		m.relist()
	}
	return cmd
}

// locate answers which lane holds a key, and shows that lane in depth.
func (m *Model) locate(k string) tea.Cmd {
	if k == "" || m.report == nil {
		return nil
	}
	places, err := m.report.Locate(k)
	if err != nil {
		m.say(true, "%s", err.Error())
		return nil
	}
	for _, p := range places {
		for _, name := range p.Lanes {
			if m.show(name) {
				cmd := m.detail()
				m.places = places
				return tea.Batch(cmd, m.readKeyPos(places))
			}
		}
	}
	p := places[0]
	m.say(true, "key %s is in partition %d of %s: no lane holds it (a gap)", printable(p.Key), p.Partition, printable(p.Layout.Destination))
	return nil
}

// detail shows the lane under the cursor in depth and reads its head.
func (m *Model) detail() tea.Cmd {
	if m.lane() == nil {
		return nil
	}
	m.mode, m.places, m.keyPos = modeDetail, nil, nil
	return m.readLane()
}

// readHead reads the shown lane's head message, unless it is the one read.
func (m *Model) readHead() tea.Cmd {
	l := m.lane()
	if l == nil || l.Head == nil || m.backend == nil {
		m.head = nil
		return nil
	}
	if m.head != nil && m.head.lane == l.Name && m.head.seq == l.Head.Seq {
		return nil
	}
	m.head = &head{lane: l.Name, seq: l.Head.Seq}
	b, stream, name, seq := m.backend, m.report.Stream, l.Name, l.Head.Seq
	return func() tea.Msg {
		msg, err := b.Head(stream, seq)
		return headMsg{lane: name, seq: seq, msg: msg, err: err}
	}
}

// plan starts action a on the selected lane (or its design) with a dry
// run: the confirmation shows what it would change, lane by lane.
func (m *Model) plan(a *Action) tea.Cmd {
	l := m.lane()
	if why := m.refuse(l); why != "" {
		m.say(true, "%s", why)
		return nil
	}
	t := laneTarget(a, m.report.Stream, l)
	m.busy = fmt.Sprintf("checking what %s would do to %s", a.Name, targetText(a, t))
	b, by := m.backend, m.cfg.By
	return func() tea.Msg {
		out, err := b.Act(a, t, by, true)
		return plannedMsg{a: a, target: t, out: out, err: err}
	}
}

func (m *Model) planned(p plannedMsg) {
	m.busy = ""
	switch {
	case p.err != nil:
		m.say(true, "%s %s: %s", p.a.Name, targetText(p.a, p.target), oneLine(p.err))
	case p.out == nil || p.out.Changed == 0:
		m.say(false, "nothing to %s: %s already %s", p.a.Name, targetText(p.a, p.target), doneWord(p.a.Name))
	default:
		m.pending = &p
		m.back, m.mode = m.mode, modeConfirm
	}
}

func (m *Model) confirming(k tea.KeyMsg) tea.Cmd {
	p := m.pending
	switch k.String() {
	case "y", "Y":
		m.pending, m.mode = nil, m.back
		m.busy = fmt.Sprintf("%s %s", gerund(p.a.Name), targetText(p.a, p.target))
		b, by := m.backend, m.cfg.By
		return func() tea.Msg {
			out, err := b.Act(p.a, p.target, by, false)
			return actedMsg{a: p.a, target: p.target, out: out, err: err}
		}
	case "n", "N", "esc", "q":
		m.pending, m.mode = nil, m.back
		m.say(false, "%s cancelled: nothing changed", p.a.Name)
	}
	return nil
}

func (m *Model) acted(a actedMsg) {
	m.busy = ""
	done := 0
	var names []string
	if a.out != nil {
		done = a.out.Changed
		for _, c := range a.out.Lanes {
			if c.Changed {
				names = append(names, c.Lane)
			}
		}
	}
	what := fmt.Sprintf("%s: %s %s", a.a.Name, plural(done, "lane"), doneWord(a.a.Name))
	if len(names) > 0 && len(names) <= 3 {
		what += " (" + printable(strings.Join(names, ", ")) + ")"
	}
	if a.err != nil {
		m.say(true, "%s, then it failed: %s", what, oneLine(a.err))
		return
	}
	m.say(false, "%s; the next refresh shows it", what)
}

func (m *Model) say(bad bool, format string, args ...any) {
	l := levelGood
	if bad {
		l = levelBad
	}
	m.sayLevel(l, format, args...)
}

func (m *Model) sayLevel(l level, format string, args ...any) {
	m.status, m.level = fmt.Sprintf(format, args...), l
}

// Err is the error that ended the view (the watch could not go on), if any.
func (m *Model) Err() error { return m.fatal }

func targetText(a *Action, t actions.Target) string {
	if a.Whole {
		return "every lane of design " + printable(t.Design)
	}
	return "lane " + printable(strings.Join(t.Lanes, ", "))
}

func doneWord(name string) string {
	switch name {
	case "pause":
		return "paused"
	case "resume":
		return "running"
	}
	return "done"
}

func gerund(name string) string {
	switch name {
	case "pause":
		return "pausing"
	case "resume":
		return "resuming"
	}
	return name
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// oneLine is an error for the status line: escaped, one line.
func oneLine(err error) string {
	return planner.Printable(planner.OneLine(err.Error(), 600), 600)
}

// problemText says why a refresh has no figures.
func problemText(err error, every time.Duration) string {
	var de *health.DisconnectedError
	if errors.As(err, &de) {
		return oneLine(de)
	}
	return fmt.Sprintf("cannot read (retrying every %s): %s", every, oneLine(err))
}
