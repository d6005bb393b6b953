package top

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
)

// column is one sortable column of the lane list. cell is the text (the
// view cuts it to width); cmp orders two lanes by it, ascending.
type column struct {
	header string
	width  int // 0: the lane column, sized to the names
	right  bool
	cell   func(v *Model, l *health.Lane) string
	cmp    func(v *Model, a, b *health.Lane) int
}

// columns of the lane list, in the order shown; "sort" cycles through them.
var columns = []column{
	{"LANE", 0, false, func(_ *Model, l *health.Lane) string { return l.Name },
		func(_ *Model, a, b *health.Lane) int { return strings.Compare(a.Name, b.Name) }},
	{"BACKLOG", 9, true, okCell(func(l *health.Lane) string { return strconv.FormatUint(l.Backlog, 10) }),
		func(_ *Model, a, b *health.Lane) int { return cmp.Compare(a.Backlog, b.Backlog) }},
	{"IN FLIGHT", 9, true, okCell(func(l *health.Lane) string {
		s := strconv.Itoa(l.AckPending) + "/" + strconv.Itoa(l.MaxAckPending)
		if l.AtCap() {
			s += "*"
		}
		return s
	}), func(_ *Model, a, b *health.Lane) int { return cmp.Compare(a.AckPending, b.AckPending) }},
	{"REDELIV", 7, true, okCell(func(l *health.Lane) string { return strconv.Itoa(l.Redelivered) }),
		func(_ *Model, a, b *health.Lane) int { return cmp.Compare(a.Redelivered, b.Redelivered) }},
	{"LAG", 7, true, okCell(func(l *health.Lane) string { return render.OptDuration(l.Age()) }),
		func(_ *Model, a, b *health.Lane) int { return cmp.Compare(lag(a), lag(b)) }},
	{"DELIV/S", 7, true, okCell(func(l *health.Lane) string { return render.RateText(l.DeliveredRate) }),
		func(_ *Model, a, b *health.Lane) int { return cmp.Compare(a.DeliveredRate, b.DeliveredRate) }},
	{"ACK/S", 7, true, okCell(func(l *health.Lane) string { return render.RateText(l.AckedRate) }),
		func(_ *Model, a, b *health.Lane) int { return cmp.Compare(a.AckedRate, b.AckedRate) }},
	{"SERVED BY", 20, false, func(_ *Model, l *health.Lane) string { return servedText(l) },
		func(_ *Model, a, b *health.Lane) int { return strings.Compare(instance(a), instance(b)) }},
	{"STATE", 8, false, func(_ *Model, l *health.Lane) string { return state(l) },
		func(_ *Model, a, b *health.Lane) int { return strings.Compare(state(a), state(b)) }},
	{"FINDING", 24, false, func(v *Model, l *health.Lane) string { return v.findingText(l.Name) },
		func(v *Model, a, b *health.Lane) int { return cmp.Compare(v.worst(a.Name), v.worst(b.Name)) }},
}

// Column numbers used by the defaults.
const (
	colLane    = 0
	colBacklog = 1
	colFinding = 9
)

// okCell shows "-" for a lane the server did not report.
func okCell(f func(l *health.Lane) string) func(*Model, *health.Lane) string {
	return func(_ *Model, l *health.Lane) string {
		if l.State != health.StateOK {
			return "-"
		}
		return f(l)
	}
}

func lag(l *health.Lane) time.Duration {
	d, ok := l.Age()
	if !ok {
		return -1
	}
	return d
}

func instance(l *health.Lane) string {
	if l.Server == nil {
		return ""
	}
	return l.Server.Instance
}

// state is the lane's state in one word: ok, paused, held, missing, offline.
func state(l *health.Lane) string {
	switch {
	case l.State != health.StateOK:
		return string(l.State)
	case l.Held != "":
		return "held"
	case l.Paused:
		return "paused"
	}
	return "ok"
}

// servedText is the lanes work instance serving the lane: "w1 (3m12s)",
// "w1 gone", "w1 handing over", "-" for none.
func servedText(l *health.Lane) string {
	srv := l.Server
	if srv == nil {
		return "-"
	}
	name := printable(srv.Instance)
	switch {
	case srv.HandingOver:
		return name + " handing over"
	case srv.Gone:
		return name + " gone"
	}
	if !l.At.IsZero() && !srv.Since.IsZero() {
		return name + " (" + render.ShortDuration(max(l.At.Sub(srv.Since), 0)) + ")"
	}
	return name
}

// printable makes server text safe for the terminal (escaped, cut).
func printable(s string) string { return planner.Printable(s, 200) }

// sortRows orders rows (indices into lanes) by column c, then by backlog
// (largest first) and name, so equal rows keep one order across refreshes.
func (v *Model) sortRows(rows []int, lanes []health.Lane, c int, desc bool) {
	col := columns[c]
	slices.SortFunc(rows, func(i, j int) int {
		a, b := &lanes[i], &lanes[j]
		r := col.cmp(v, a, b)
		if desc {
			r = -r
		}
		if r == 0 && c != colBacklog {
			r = -cmp.Compare(a.Backlog, b.Backlog)
		}
		if r == 0 {
			r = strings.Compare(a.Name, b.Name)
		}
		return r
	})
}

// filter is the parsed filter: every term must match. A term is
// field:value (lane, key, state, instance) or a bare word matching any of
// them; matching is by substring, ignoring case. key:K matches the lanes
// that hold K (Report.Locate: where its next messages go, in each
// generation) and the lanes whose head message has key K.
type filter struct {
	terms []term
}

type term struct {
	field string          // "" for any
	raw   string          // as typed, for keys (case matters)
	value string          // lower case
	holds map[string]bool // key: the lanes that hold it
}

var filterFields = []string{"lane", "key", "state", "instance"}

func parseFilter(text string, r *health.Report) filter {
	var f filter
	for _, w := range strings.Fields(text) {
		t := term{raw: w}
		if field, value, ok := strings.Cut(w, ":"); ok && slices.Contains(filterFields, strings.ToLower(field)) {
			t.field, t.raw = strings.ToLower(field), value
		}
		t.value = strings.ToLower(t.raw)
		if t.field == "key" && r != nil && t.raw != "" {
			if places, err := r.Locate(t.raw); err == nil {
				t.holds = map[string]bool{}
				for _, p := range places {
					for _, n := range p.Lanes {
						t.holds[n] = true
					}
				}
			}
		}
		f.terms = append(f.terms, t)
	}
	return f
}

func (f filter) empty() bool { return len(f.terms) == 0 }

func (f filter) match(v *Model, l *health.Lane) bool {
	for _, t := range f.terms {
		if !t.match(v, l) {
			return false
		}
	}
	return true
}

func (t term) match(v *Model, l *health.Lane) bool {
	has := func(s string) bool { return strings.Contains(strings.ToLower(s), t.value) }
	key := func() bool {
		return t.holds[l.Name] || l.Head != nil && l.Head.Key != "" && l.Head.Key == t.raw
	}
	stateMatch := func() bool {
		if has(state(l)) {
			return true
		}
		for _, fi := range v.byLane[l.Name] {
			if has(v.report.Findings[fi].Code) {
				return true
			}
		}
		return false
	}
	switch t.field {
	case "lane":
		return has(l.Name)
	case "key":
		return key()
	case "state":
		return stateMatch()
	case "instance":
		return has(instance(l))
	}
	return has(l.Name) || l.Head != nil && has(l.Head.Key) || has(instance(l)) || stateMatch()
}
