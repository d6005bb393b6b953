package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// InspectTable prints the lane report: a stream line, one row per lane with
// a backlog bar, the summary, and the findings with their advice.
func InspectTable(w io.Writer, s Styles, r *health.Report) error {
	inspectHeading(w, s, r)
	fmt.Fprintln(w)
	if len(r.Lanes) == 0 {
		fmt.Fprintln(w, s.Warn.Render("No lanes: "+noLanesText(r)))
	} else if err := laneTable(w, s, r); err != nil {
		return err
	}
	fmt.Fprintln(w)
	inspectSummary(w, s, r)
	fmt.Fprintln(w)
	if len(r.Lanes) == 0 && len(r.Findings) == 0 {
		fmt.Fprintln(w, "No findings: with no lanes there was nothing to judge.")
		return nil
	}
	findings(w, s, r)
	return nil
}

// noLanesText says what inspect looked for, so "no lanes" is not taken
// for "healthy".
func noLanesText(r *health.Report) string {
	what := "no consumer of this stream carries lanes metadata (lanes.design)"
	if len(r.Layouts) == 0 {
		return what + ", and the stream has no partition mapping inspect can read (give the design with -f to judge it)."
	}
	return what + " or filters exactly one partition of its mapping."
}

func inspectHeading(w io.Writer, s Styles, r *health.Report) {
	fmt.Fprintln(w, s.Heading.Render(fmt.Sprintf("Stream %s: last seq %d, %d messages, %d consumers", clean(r.Stream), r.LastSeq, r.Messages, r.Consumers)))
	for _, l := range r.Layouts {
		where := map[string]string{"design": "design file", "stream": "stream subject transform", "lanes": "lane metadata"}[l.Origin]
		if l.Current {
			where += ", current"
		}
		s.kv(w, [][2]string{{"mapping", fmt.Sprintf("%s -> %s (%s)", clean(l.Source), clean(l.Destination), where)}})
	}
}

// laneColumn is one column of the lane table; optional columns appear
// only when some lane has a value for them.
type laneColumn struct {
	header string
	cell   func(health.Lane) string
	shown  func(*health.Report) bool
}

func laneColumns(s Styles, r *health.Report) []laneColumn {
	always := func(*health.Report) bool { return true }
	anyLane := func(f func(health.Lane) bool) func(*health.Report) bool {
		return func(r *health.Report) bool {
			for _, l := range r.Lanes {
				if f(l) {
					return true
				}
			}
			return false
		}
	}
	ok := func(f func(health.Lane) string) func(health.Lane) string {
		return func(l health.Lane) string {
			if l.State != health.StateOK {
				return "-"
			}
			return f(l)
		}
	}
	num := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []laneColumn{
		{"LANE", func(l health.Lane) string { return clean(l.Name) }, always},
		{"P", func(l health.Lane) string {
			if l.Partition < 0 {
				return "?"
			}
			return strconv.Itoa(l.Partition)
		}, always},
		{"PENDING", ok(func(l health.Lane) string { return num(l.Pending) }), always},
		{"ACK", ok(func(l health.Lane) string { return ackPending(s, l) }), always},
		{"REDELIV", ok(func(l health.Lane) string { return strconv.Itoa(l.Redelivered) }), always},
		{"WAIT", ok(func(l health.Lane) string { return strconv.Itoa(l.Waiting) }), always},
		{"DELIVERED", ok(func(l health.Lane) string { return num(l.DeliveredSeq) }), always},
		{"ACK FLOOR", ok(func(l health.Lane) string { return num(l.AckFloorSeq) }), always},
		{"LAG", ok(func(l health.Lane) string { return OptDuration(l.Age()) }), always},
		{"LAST DELIV", ok(func(l health.Lane) string { return OptDuration(l.SinceDelivery()) }), always},
		{"LAST ACK", ok(func(l health.Lane) string { return OptDuration(l.SinceAck()) }), always},
		{"DELIV/S", ok(func(l health.Lane) string { return RateText(l.DeliveredRate) }), func(r *health.Report) bool { return r.Interval > 0 }},
		{"ACK/S", ok(func(l health.Lane) string { return RateText(l.AckedRate) }), func(r *health.Report) bool { return r.Interval > 0 }},
		{"PINNED", ok(pinnedText), anyLane(func(l health.Lane) bool { return l.PinnedTTL > 0 })},
		{"SERVED BY", func(l health.Lane) string { return servedText(s, l) }, anyLane(func(l health.Lane) bool { return l.Server != nil })},
		{"RUNNING", func(l health.Lane) string { return runningText(s, l) }, anyLane(func(l health.Lane) bool {
			return l.Server != nil && (l.Server.Running != nil || l.Server.Outage != nil)
		})},
		{"WINDOW", ok(func(l health.Lane) string { return windowText(s, l) }), anyLane(health.Lane.KeyParallel)},
		{"KEYS RUN", ok(keysRunningText), anyLane(health.Lane.KeyParallel)},
		{"OLDEST WAIT", ok(oldestWaitingText), anyLane(health.Lane.KeyParallel)},
		{"LEADER", func(l health.Lane) string { return dash(clean(l.Leader)) }, anyLane(func(l health.Lane) bool { return l.Leader != "" })},
		{"STATE", func(l health.Lane) string { return stateText(s, l) }, always},
		{"BACKLOG", ok(func(l health.Lane) string { return num(l.Backlog) }), always},
	}
}

func laneTable(w io.Writer, s Styles, r *health.Report) error {
	var cols []laneColumn
	for _, c := range laneColumns(s, r) {
		if c.shown(r) {
			cols = append(cols, c)
		}
	}
	headers := make([]string, 0, len(cols)+1)
	for _, c := range cols {
		headers = append(headers, c.header)
	}
	t := newTable(w, append(headers, "")...)
	top, mean := float64(r.Summary.MaxBacklog), r.Summary.MeanBacklog
	for _, l := range r.Lanes {
		row := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			row = append(row, c.cell(l))
		}
		hot := mean > 0 && float64(l.Backlog) > 1.5*mean
		row = append(row, s.Bar(float64(l.Backlog), top, 20, hot))
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if r.Summary.AtCap > 0 {
		fmt.Fprintln(w, s.Dim.Render("* at its max ack pending: the lane delivers the next message only after an ack"))
	}
	return nil
}

func ackPending(s Styles, l health.Lane) string {
	v := fmt.Sprintf("%d/%d", l.AckPending, l.MaxAckPending)
	if l.AtCap() {
		return s.Warn.Render(v + "*")
	}
	return v
}

func pinnedText(l health.Lane) string {
	if l.PinnedClient == "" {
		return "-"
	}
	id := clean(l.PinnedClient)
	if len(id) > 8 {
		id = id[:8]
	}
	if d, ok := sinceTime(l.At, l.PinnedSince); ok {
		return fmt.Sprintf("%s (%s)", id, ShortDuration(d))
	}
	return id
}

// servedText is the lanes work instance serving the lane and for how
// long: "one (3m12s)", or "one gone" when that instance is no longer a
// member and nobody took the lane.
func servedText(s Styles, l health.Lane) string {
	srv := l.Server
	if srv == nil {
		return "-"
	}
	name := clean(srv.Instance)
	switch {
	case srv.HandingOver:
		return name + " (handing over)"
	case srv.Gone:
		return s.Bad.Render(name + " gone")
	}
	if d, ok := sinceTime(l.At, srv.Since); ok {
		return fmt.Sprintf("%s (%s)", name, ShortDuration(d))
	}
	return name
}

// runningText is how long a message lanes work records as running long
// has run, and which: "45s seq 3"; or how long its handler has not been
// able to run at all: "outage 12s".
func runningText(s Styles, l health.Lane) string {
	if l.Server == nil || l.Server.Gone {
		return "-"
	}
	if o := l.Server.Outage; o != nil {
		if d, ok := sinceTime(l.At, o.Since); ok {
			return s.Bad.Render("outage " + ShortDuration(d))
		}
		return s.Bad.Render("outage")
	}
	if l.Server.Running == nil {
		return "-"
	}
	in := l.Server.Running
	if d, ok := sinceTime(l.At, in.Since); ok {
		return s.Warn.Render(fmt.Sprintf("%s seq %d", ShortDuration(d), in.Seq))
	}
	return s.Warn.Render(fmt.Sprintf("seq %d", in.Seq))
}

// windowText is a key-parallel lane's window as its owner records it:
// messages held out of its keys in flight ("5/8"; "-/8" with no record
// from a live owner), and the key that holds all of it, if one does
// ("8/8 bob").
func windowText(s Styles, l health.Lane) string {
	if !l.KeyParallel() {
		return "-"
	}
	w := l.Window()
	if w == nil {
		return fmt.Sprintf("-/%d", l.KeysInFlight)
	}
	v := fmt.Sprintf("%d/%d", w.Held, l.KeysInFlight)
	switch {
	case w.Holder != "" && l.AtCap():
		return s.Bad.Render(v + " " + planner.Printable(w.Holder, maxKey))
	case w.Held >= l.KeysInFlight:
		return s.Warn.Render(v)
	}
	return v
}

// maxKey bounds a key in a table cell.
const maxKey = 24

// keysRunningText is how many keys of a key-parallel lane have a message
// running, as its owner records it.
func keysRunningText(l health.Lane) string {
	if w := l.Window(); w != nil {
		return strconv.Itoa(w.RunningCount)
	}
	return "-"
}

// oldestWaitingText is the key of a key-parallel lane's message that has
// waited longest for its key's earlier one, and for how long: "bob 12s".
func oldestWaitingText(l health.Lane) string {
	oldest, waited, ok := l.OldestWaiting()
	if !ok {
		return "-"
	}
	return planner.Printable(oldest.Key, maxKey) + " " + ShortDuration(waited)
}

func sinceTime(at, t time.Time) (time.Duration, bool) {
	if at.IsZero() || t.IsZero() {
		return 0, false
	}
	return max(at.Sub(t), 0), true
}

func stateText(s Styles, l health.Lane) string {
	switch {
	case l.State != health.StateOK:
		return s.Bad.Render(string(l.State))
	case l.Held != "":
		return s.Warn.Render("held")
	case l.Paused:
		return s.Warn.Render("paused")
	}
	return "ok"
}

// RateText is a rate per second for a table cell: 0, 2.5, 340.
func RateText(v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// OptDuration is ShortDuration, or "-" when there is none.
func OptDuration(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return ShortDuration(d)
}

// shortDuration is a duration for a table cell: 850ms, 12s, 3m12s, 2h5m, 3d4h.
func ShortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, (d%time.Hour)/time.Minute)
	}
	return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
}

func inspectSummary(w io.Writer, s Styles, r *health.Report) {
	m := r.Summary
	fmt.Fprintln(w, s.Heading.Render("Summary"))
	lanes := fmt.Sprintf("%d answering (%d at their cap, %d paused)", m.Lanes, m.AtCap, m.Paused)
	if m.Unavailable > 0 {
		lanes += ", " + s.Bad.Render(fmt.Sprintf("%d unavailable", m.Unavailable))
	}
	backlog := fmt.Sprintf("total %d, mean %.1f per lane", m.TotalBacklog, m.MeanBacklog)
	if m.Hottest != "" {
		ratio := fmt.Sprintf("%.2f", m.MaxToMean)
		if m.MaxToMean >= 1.5 {
			ratio = s.Warn.Render(ratio)
		}
		backlog += fmt.Sprintf(", max %d (%s), max/mean %s", m.MaxBacklog, m.Hottest, ratio)
	}
	pairs := [][2]string{{"lanes", lanes}, {"backlog", backlog}}
	if r.WorkersUnknown != "" {
		pairs = append(pairs, [2]string{"workers", s.Warn.Render("unknown (the membership bucket could not be read)")})
	}
	for _, wk := range r.Workers {
		if len(wk.Live)+len(wk.Gone)+len(wk.Parked)+len(wk.Quarantined) == 0 {
			continue // no worker ever ran (or none for an hour): nothing to say
		}
		pairs = append(pairs, [2]string{"workers", workersText(r, wk)})
		for _, p := range wk.Parked {
			pairs = append(pairs, [2]string{"parked", parkedText(wk.Design, p)})
		}
		for _, q := range wk.Quarantined {
			pairs = append(pairs, [2]string{"quarantined", quarantinedText(wk.Design, q)})
		}
	}
	pairs = append(pairs, [2]string{"findings", fmt.Sprintf("%d critical, %d warning, %d info", m.Critical, m.Warnings, m.Infos)})
	s.kv(w, pairs)
}

// workersText: "orders: 2 live (one, two); gone in the last hour: three (lease expired 2m0s ago)".
func workersText(r *health.Report, wk health.Workers) string {
	names := func(is []membership.Member) string {
		out := make([]string, 0, min(len(is), 4))
		for i, in := range is {
			if i == 3 {
				out = append(out, fmt.Sprintf("%d more", len(is)-3))
				break
			}
			out = append(out, clean(in.Instance))
		}
		return strings.Join(out, ", ")
	}
	text := fmt.Sprintf("%s: %d live", clean(wk.Design), len(wk.Live))
	if len(wk.Live) > 0 {
		text += " (" + names(wk.Live) + ")"
	}
	if len(wk.Gone) == 0 {
		return text
	}
	text += "; gone in the last hour: "
	for i, g := range wk.Gone {
		if i == 3 {
			return text + fmt.Sprintf(", %d more", len(wk.Gone)-3)
		}
		if i > 0 {
			text += ", "
		}
		how := "stopped"
		if g.Expired {
			how = "lease expired"
		}
		if d, ok := sinceTime(r.Time, g.Renewed); ok {
			how += " " + ShortDuration(d) + " ago"
		}
		text += fmt.Sprintf("%s (%s)", clean(g.Instance), how)
	}
	return text
}

// parkedText: "orders: 3 on dlq.orders (stream DLQ)".
func parkedText(design string, p health.Parked) string {
	head := fmt.Sprintf("%s: ", clean(design))
	switch {
	case p.Err != "":
		return head + fmt.Sprintf("unknown on %s (%s)", clean(p.Subject), planner.Printable(p.Err, maxFinding))
	case p.Stream == "":
		return head + fmt.Sprintf("%s is stored by no stream", clean(p.Subject))
	}
	return head + fmt.Sprintf("%d on %s (stream %s)", p.Count, clean(p.Subject), clean(p.Stream))
}

// quarantinedText: "orders: key alice since seq 42 (lane orders-n4-p1, 2026-...: boom)".
func quarantinedText(design string, q membership.Quarantine) string {
	text := fmt.Sprintf("%s: key %s since seq %d (lane %s, %s", clean(design), planner.Quote(q.Key, 100), q.Seq, clean(q.Lane), q.At.UTC().Format(time.RFC3339))
	if q.Error != "" {
		text += ": " + planner.Printable(planner.OneLine(q.Error, 120), 120)
	}
	text += ")"
	if q.State != membership.QuarantineOn {
		text += ", " + clean(q.State)
	}
	return text
}

// findingsPerCode bounds the table's findings of one code: with 1,024
// lanes without workers, five lines say it; JSON lists every one.
const findingsPerCode = 5

// findings prints the report's findings under a heading, each with its advice.
func findings(w io.Writer, s Styles, r *health.Report) {
	fs := r.Findings
	if len(fs) == 0 {
		look := "look"
		if r.Summary.Lanes == 1 {
			look = "looks"
		}
		fmt.Fprintln(w, s.Good.Render(fmt.Sprintf("No findings: the %s %s healthy.", plural(int64(r.Summary.Lanes), "lane"), look)))
		return
	}
	fmt.Fprintln(w, s.Heading.Render("Findings"))
	shown := map[string]int{}
	total := map[string]int{}
	for _, f := range fs {
		total[f.Code]++
	}
	for _, f := range fs {
		if shown[f.Code]++; shown[f.Code] > findingsPerCode {
			if shown[f.Code] == findingsPerCode+1 {
				fmt.Fprintf(w, "  %s  %s\n", strings.Repeat(" ", len("CRITICAL")),
					s.Dim.Render(fmt.Sprintf("... and %d more %s findings (-o json lists them all)", total[f.Code]-findingsPerCode, f.Code)))
			}
			continue
		}
		label := strings.ToUpper(f.Severity.String())
		pad := strings.Repeat(" ", len("CRITICAL")-len(label))
		switch f.Severity {
		case health.Critical:
			label = s.Bad.Render(label)
		case health.Warning:
			label = s.Warn.Render(label)
		default:
			label = s.Dim.Render(label)
		}
		fmt.Fprintf(w, "  %s%s  %s: %s\n", label, pad, f.Code, planner.Printable(f.Message, maxFinding))
		fmt.Fprintf(w, "  %s  %s\n", strings.Repeat(" ", len("CRITICAL")), s.Dim.Render("-> "+planner.Printable(f.Advice, maxFinding)))
	}
}

// KeyPlaces prints where a key's messages go, before its lane's report.
func KeyPlaces(w io.Writer, s Styles, places []health.KeyPlace) {
	for _, p := range places {
		lanes, state := "no lane (a gap: its messages are never delivered)", ""
		switch {
		case len(p.Lanes) > 0:
			lanes = "lane " + s.Heading.Render(clean(strings.Join(p.Lanes, ", ")))
			if !p.Layout.Current && len(places) > 1 {
				state = " (older partitioning: its earlier messages drain here)"
			}
		case p.Layout.Origin == "design" && !p.Layout.Current:
			lanes = "no lane (the design file's mapping, not the one in force: new messages do not go there)"
		}
		fmt.Fprintf(w, "%s (key %s) is in partition %d of %s: %s%s\n", clean(p.Subject), clean(p.Key), p.Partition, clean(p.Layout.Destination), lanes, state)
		s.kv(w, [][2]string{{"stored as", clean(p.Stored)}})
	}
	fmt.Fprintln(w)
}

// WatchHeader is the first line of each watch refresh; problem, when not
// empty, says why this refresh has no fresh figures (e.g. reconnecting).
func WatchHeader(w io.Writer, s Styles, at time.Time, every time.Duration, problem string) {
	line := fmt.Sprintf("%s  every %s  (Ctrl-C to stop)", at.Format("15:04:05"), every)
	fmt.Fprintln(w, s.Dim.Render(line))
	if problem != "" {
		fmt.Fprintln(w, s.Warn.Render(planner.Printable(problem, maxFinding)))
	}
}
