package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/planner"
)

// ApplyDoc is the JSON (and YAML) document of lanes apply, apply
// --dry-run and plan --server. Scripts rely on its field names.
type ApplyDoc struct {
	Server string `json:"server"`
	DryRun bool   `json:"dry_run"`
	// Status is the outcome in one word: nothing_to_do, pending (dry run),
	// applied, refused, incomplete, stopped or failed.
	Status string `json:"status"`
	// Pending: the server differs from the design, whether or not apply
	// changed it (also when it refused to).
	Pending bool `json:"changes_pending"`
	// Refused: apply changed nothing because a change needs a flag, a
	// confirmation, or another apply holds the lock; Reasons say why.
	Refused bool     `json:"refused"`
	Reasons []string `json:"reasons,omitempty"`
	// NeedsConfirmation: the changes touch an existing stream, so apply
	// asks on a terminal and needs --yes without one.
	NeedsConfirmation bool `json:"needs_confirmation"`
	// LockHolder is the apply holding the stream's lock, when that is
	// why this one refused.
	LockHolder *converge.LockOwner `json:"lock_holder,omitempty"`
	Diff       *converge.Diff      `json:"diff"`
	// Result is what was applied.
	Result *converge.Result `json:"result,omitempty"`
	// Remaining is what is left to do: a re-run does it.
	Remaining []string `json:"remaining,omitempty"`
	// Error is the error apply stopped with, as printed on stderr.
	Error string `json:"error,omitempty"`
}

// DiffTable prints what apply would do: the stream, a repartition in
// progress, one row per lane change (runs of identical changes folded
// into one row), refusals, what is out of reach, and a summary.
func DiffTable(w io.Writer, s Styles, server string, d *converge.Diff) error {
	fmt.Fprintln(w, s.Heading.Render(fmt.Sprintf("Design %s on %s, stream %s", clean(d.Design), clean(server), clean(d.Stream.Name))))
	streamSection(w, s, d)
	if rp := d.Repartition; rp != nil {
		fmt.Fprintln(w)
		state := "mapping not switched yet"
		if rp.Switched {
			state = "mapping switched"
		}
		fmt.Fprintln(w, s.Heading.Render(fmt.Sprintf("Repartition %s -> %s (%s mapping, %s)", genList(rp.From), planner.Generation(rp.To), rp.Mapping, state)))
		fmt.Fprintf(w, "  next: %s\n", line(rp.Step))
	}
	if err := laneSection(w, s, d); err != nil {
		return err
	}
	if len(d.Refusals) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, s.Bad.Render("Refused (nothing will be changed):"))
		bullets(w, d.Refusals)
	}
	if len(d.OutOfReach) > 0 || d.OtherConsumers > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, s.Heading.Render("Left alone:"))
		notes := append([]string(nil), d.OutOfReach...)
		if d.OtherConsumers > 0 {
			notes = append(notes, fmt.Sprintf("%d other consumers on the stream (not lanes of design %s)", d.OtherConsumers, d.Design))
		}
		bullets(w, notes)
	}
	if a := d.Account; a != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, s.Warn.Render("Account mapping: the operator installs it, apply cannot"))
		fmt.Fprintf(w, "  mappings { %q: %q }   (lanes plan ... -o conf, or -o nsc)\n", clean(a.Source), clean(a.Destination))
		fmt.Fprintln(w, "  Not verifiable from a client:")
		bullets(w, a.Unverified)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, summaryLine(s, d))
	return nil
}

func streamSection(w io.Writer, s Styles, d *converge.Diff) {
	sc := d.Stream
	changes := sc.Changes
	if sc.SwitchMapping != nil {
		changes = append(changes, *sc.SwitchMapping)
	}
	fmt.Fprintf(w, "  stream  %s\n", actionWord(s, sc.Action, len(changes) > 0))
	for _, c := range changes {
		note := ""
		if sc.SwitchMapping != nil && c.Field == sc.SwitchMapping.Field {
			note = "  (switched once the new lanes exist, held)"
		}
		if c.Field == "subject_transform" {
			c = transformChange(c)
		}
		fmt.Fprintf(w, "    %s: %s -> %s%s\n", clean(c.Field), value(c.Field, c.Old), value(c.Field, c.New), note)
	}
}

// transformChange shows only the destination when the source stays.
func transformChange(c converge.FieldChange) converge.FieldChange {
	var old, nu planner.SubjectTransform
	if json.Unmarshal(c.Old, &old) != nil || json.Unmarshal(c.New, &nu) != nil || old.Source != nu.Source || old.Source == "" {
		return c
	}
	return converge.FieldChange{Field: "subject_transform.dest (from " + nu.Source + ")", Old: raw(old.Destination), New: raw(nu.Destination)}
}

func raw(v any) json.RawMessage {
	b, _ := marshalJSON(v, "", "")
	return b
}

func actionWord(s Styles, a converge.Action, switching bool) string {
	switch a {
	case converge.ActionCreate:
		return s.Good.Render("create")
	case converge.ActionUpdate:
		return s.Warn.Render("update")
	}
	if switching {
		return s.Warn.Render("update")
	}
	return s.Dim.Render("unchanged")
}

// laneGroup is a run of consecutive lanes (partitions p, p+1, ... of one
// generation) with the same action and the same changes.
type laneGroup struct {
	first, last string
	n           int
	lane        converge.LaneChange
	key         string
	end         int // index in the diff of the group's last lane
}

func laneSection(w io.Writer, s Styles, d *converge.Diff) error {
	var groups []*laneGroup
	for i, l := range d.Lanes {
		if l.Action == converge.ActionUnchanged && !l.Held && l.Reason == "" {
			continue
		}
		k := groupKey(l)
		if g := last(groups); g != nil && g.key == k && g.end == i-1 && l.Partition == g.lane.Partition+g.n {
			g.last, g.n, g.end = l.Name, g.n+1, i
			continue
		}
		groups = append(groups, &laneGroup{first: l.Name, last: l.Name, n: 1, lane: l, key: k, end: i})
	}
	if len(groups) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "LANE", "ACTION", "FIELD", "OLD", "NEW", "NOTE")
	for _, g := range groups {
		name := g.first
		if g.n > 1 {
			name = fmt.Sprintf("%s .. %s (%d)", g.first, g.last, g.n)
		}
		rows := laneRows(s, g.lane, g.n > 1)
		rows[0][0] = clean(name)
		for _, r := range rows {
			if err := t.Append(r); err != nil {
				return err
			}
		}
	}
	return t.Render()
}

func last(gs []*laneGroup) *laneGroup {
	if len(gs) == 0 {
		return nil
	}
	return gs[len(gs)-1]
}

// groupKey: lanes fold together when everything shown but the name is equal.
func groupKey(l converge.LaneChange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%v|%d|%s|", l.Action, l.Held, l.Partitions, l.Reason)
	for _, c := range l.Changes {
		c = anyPartition(l, c)
		fmt.Fprintf(&b, "%s=%s>%s;", c.Field, c.Old, c.New)
	}
	if l.Action == converge.ActionDrain || l.Action == converge.ActionDelete || l.Action == converge.ActionKeep || l.Position != nil {
		fmt.Fprintf(&b, "|%d|%+v", l.Backlog, l.Position) // these show per-lane numbers
	}
	return b.String()
}

// anyPartition: a lane's description names its partition ("serial lane
// for partition 3 of 8"), so lanes whose descriptions change alike (a
// change of keys in flight) differ only there. They fold into one row,
// which names the partition P.
func anyPartition(l converge.LaneChange, c converge.FieldChange) converge.FieldChange {
	if c.Field != "description" {
		return c
	}
	own := fmt.Sprintf(" for partition %d of ", l.Partition)
	c.Old = json.RawMessage(strings.Replace(string(c.Old), own, " for partition P of ", 1))
	c.New = json.RawMessage(strings.Replace(string(c.New), own, " for partition P of ", 1))
	return c
}

// laneRows shows one lane's change, or a folded run's (folded: the
// partition in a description reads P).
func laneRows(s Styles, l converge.LaneChange, folded bool) [][]string {
	action := laneAction(s, l.Action)
	note := laneNote(l)
	if len(l.Changes) == 0 {
		return [][]string{{"", action, "", "", "", line(note)}}
	}
	var rows [][]string
	for i, c := range l.Changes {
		if folded {
			c = anyPartition(l, c)
		}
		field := c.Field
		if c.Immutable {
			field += s.Bad.Render(" (immutable)")
		}
		r := []string{"", "", clean(field), value(c.Field, c.Old), value(c.Field, c.New), ""}
		if i == 0 {
			r[1], r[5] = action, line(note)
		}
		rows = append(rows, r)
	}
	return rows
}

func laneAction(s Styles, a converge.Action) string {
	switch a {
	case converge.ActionCreate, converge.ActionResume, converge.ActionFinish:
		return s.Good.Render(string(a))
	case converge.ActionRefused, converge.ActionDelete, converge.ActionUnavailable:
		return s.Bad.Render(string(a))
	case converge.ActionKeep, converge.ActionUnchanged:
		return s.Dim.Render(string(a))
	}
	return s.Warn.Render(string(a))
}

func laneNote(l converge.LaneChange) string {
	var parts []string
	if k := l.KeysInFlight; k != nil {
		text := fmt.Sprintf("keys in flight %d -> %d", k.From, k.To)
		if l.Action == converge.ActionUpdate {
			text += ": updated in place, the lane keeps its position"
		}
		parts = append(parts, text)
	}
	if l.Held {
		parts = append(parts, "held until the old lanes drain")
	}
	switch l.Action {
	case converge.ActionDrain, converge.ActionKeep, converge.ActionDelete:
		parts = append(parts, fmt.Sprintf("backlog %d", l.Backlog))
	}
	if p := l.Position; p != nil {
		parts = append(parts, positionText(*p, false))
	}
	if l.StartSeq > 1 && l.Action == converge.ActionCreate && l.Missing == nil { // a missing lane's reason says where it restarts
		parts = append(parts, fmt.Sprintf("starts at stream seq %d (nothing stored for its generation before it is replayed)", l.StartSeq))
	}
	if l.Reason != "" && l.Action != converge.ActionRefused && l.Action != converge.ActionRecreate {
		parts = append(parts, l.Reason)
	}
	if l.Action == converge.ActionRefused {
		parts = append(parts, "see Refused below")
	}
	return strings.Join(parts, "; ")
}

// positionText says where a recreated lane restarts. Before apply, the
// messages in flight are counted; after, the recreate names the lane's own
// messages it delivers again, looked up on its filter.
func positionText(p converge.Position, applied bool) string {
	t := fmt.Sprintf("restarts at stream seq %d", p.StartSeq)
	switch {
	case applied && len(p.Redelivered) > 0:
		seqs := make([]string, len(p.Redelivered))
		for i, s := range p.Redelivered {
			seqs[i] = strconv.FormatUint(s, 10)
		}
		t += ", delivered again: " + strings.Join(seqs, ", ")
		if p.RedeliveredMore {
			t += " and more"
		}
	case applied && p.Redelivered != nil:
		t += ", nothing in flight"
	case p.InFlight > 0:
		t += fmt.Sprintf(", %d in flight (delivered again unless acked while the lane is paused)", p.InFlight)
	}
	return t
}

// value shows a field's JSON value for people: durations as 30s, strings
// without quotes, an absent value as "-"; escaped, like every text that
// came from a server.
func value(field string, v json.RawMessage) string { return clean(rawValue(field, v)) }

// line makes a sentence that carries names, subjects or server text safe
// for a terminal: escaped, and cut only when it is very long.
func line(s string) string { return planner.Printable(s, maxLine) }

// maxLine bounds one line of the diff or result (a refusal's reason).
const maxLine = 4000

func rawValue(field string, v json.RawMessage) string {
	s := strings.TrimSpace(string(v))
	if s == "" || s == "null" {
		return "-"
	}
	switch field {
	case "ack_wait", "priority_timeout":
		var ns int64
		if json.Unmarshal(v, &ns) == nil {
			return time.Duration(ns).String()
		}
	case "backoff":
		var list []int64
		if json.Unmarshal(v, &list) == nil {
			parts := make([]string, len(list))
			for i, ns := range list {
				parts[i] = time.Duration(ns).String()
			}
			return strings.Join(parts, ",")
		}
	case "subject_transform":
		var t planner.SubjectTransform
		if json.Unmarshal(v, &t) == nil {
			return t.Source + " -> " + t.Destination
		}
	}
	var str string
	if json.Unmarshal(v, &str) == nil {
		return str
	}
	return s
}

func summaryLine(s Styles, d *converge.Diff) string {
	if !d.Pending() && !d.Refused() && len(d.Unavailable()) == 0 {
		return s.Good.Render(fmt.Sprintf("Nothing to do: stream %s and its %d lanes are as designed.", clean(d.Stream.Name), len(d.Plan().Lanes)))
	}
	c := d.Counts()
	order := []converge.Action{converge.ActionCreate, converge.ActionUpdate, converge.ActionHold, converge.ActionResume,
		converge.ActionRecreate, converge.ActionFinish, converge.ActionDrain, converge.ActionDelete, converge.ActionKeep,
		converge.ActionRefused, converge.ActionUnavailable, converge.ActionUnchanged}
	var parts []string
	for _, a := range order {
		if c[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c[a], a))
		}
	}
	return "Lanes: " + strings.Join(parts, ", ") + "."
}

// ResultTable prints what apply did, and what is left when it stopped
// early (err is what it stopped with; the error itself goes to stderr).
func ResultTable(w io.Writer, s Styles, r *converge.Result, err error) {
	fmt.Fprintln(w)
	var done []string
	if r.StreamCreated {
		done = append(done, "stream created")
	}
	if r.StreamUpdated {
		done = append(done, "stream updated")
	}
	if r.MappingSwitched {
		done = append(done, "mapping switched to the new lanes")
	}
	for _, c := range []struct {
		n    int
		what string
	}{{r.Created, "created"}, {r.Updated, "updated"}, {r.Held, "held"}, {r.Resumed, "resumed"}, {len(r.Recreated), "recreated"}, {r.Deleted, "deleted"}} {
		if c.n > 0 {
			done = append(done, fmt.Sprintf("%d lanes %s", c.n, c.what))
		}
	}
	heading := fmt.Sprintf("Applied in %s (%d write requests)", r.Elapsed.Round(time.Millisecond), r.WriteRequests)
	var stopped *converge.StoppedError
	switch {
	case err != nil && len(done) == 0 && r.WriteRequests == r.RefusedWrites:
		// Every write was refused (a stream whose subjects overlap
		// another's), or none was sent: the server is as it was.
		fmt.Fprintln(w, s.Bad.Render("Nothing was changed (see the error on stderr)"))
		return
	case errors.As(err, &stopped):
		heading = fmt.Sprintf("Stopped after %s (%d write requests)", r.Elapsed.Round(time.Millisecond), r.WriteRequests)
	case err != nil:
		heading = fmt.Sprintf("Partly applied in %s (%d write requests)", r.Elapsed.Round(time.Millisecond), r.WriteRequests)
	}
	fmt.Fprintln(w, s.Heading.Render(heading))
	switch {
	case len(done) == 0 && err == nil:
		done = append(done, "nothing changed")
	case len(done) == 0:
		// Some writes were accepted (or not answered) before the error:
		// they may have changed something, but finished no step.
		done = append(done, fmt.Sprintf("no step finished (%d write requests, %d refused by the server)", r.WriteRequests, r.RefusedWrites))
	}
	fmt.Fprintf(w, "  %s\n", strings.Join(done, "; "))
	for _, rc := range r.Recreated {
		fmt.Fprintf(w, "  %s %s\n", clean(rc.Lane), positionText(rc.Position, true))
	}
	if dr := r.Drain; dr != nil {
		state := s.Good.Render("drained")
		if !dr.Drained {
			state = s.Warn.Render(fmt.Sprintf("%d messages left", dr.Remaining))
		}
		fmt.Fprintf(w, "  old lanes: %d, backlog %d at the start, %s after %s\n", dr.Lanes, dr.Initial, state, dr.Waited.Round(time.Millisecond))
	}
	for _, warning := range r.Warnings {
		fmt.Fprintln(w, s.Warn.Render("  warning: "+line(warning)))
	}
	if len(r.Failures) > 0 {
		fmt.Fprintln(w, s.Bad.Render(fmt.Sprintf("  %d lane changes failed (see stderr)", len(r.Failures))))
	}
	if len(r.Remaining) > 0 {
		fmt.Fprintln(w, s.Warn.Render("  not done (a re-run does it):"))
		for _, left := range r.Remaining {
			fmt.Fprintf(w, "    - %s\n", line(left))
		}
	}
}

func bullets(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "  - %s\n", line(l))
	}
}

func genList(gens []int) string {
	parts := make([]string, len(gens))
	for i, g := range gens {
		parts[i] = planner.Generation(g)
	}
	return strings.Join(parts, ", ")
}
