package render

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/planner"
)

// SkipOutcome shows what lanes skip did (or would do) to a lane's
// message: which message, how it is settled, by whom.
func SkipOutcome(w io.Writer, s Styles, o *actions.SkipOutcome) error {
	attempts := "unknown"
	if o.Attempts > 0 {
		attempts = strconv.Itoa(o.Attempts)
	}
	kind := "serial"
	if o.KeyParallel {
		kind = "key-parallel"
	}
	how := o.How
	if o.DeadLetter != "" {
		how += " (on " + o.DeadLetter + ")"
	}
	running := o.RunningOn
	if running == "" {
		running = "no lanes work instance"
	}
	t := newTable(w, "", "")
	for _, row := range [][2]string{
		{"lane", o.Lane + " (" + kind + ")"},
		{"message", "seq " + strconv.FormatUint(o.Seq, 10) + " " + o.Subject},
		{"key", o.Key},
		{"stored", o.Stored.Format("2006-01-02T15:04:05Z") + " (" + o.Age + " ago)"},
		{"attempts", attempts},
		{"served by", running},
		{"skip", how},
		{"settled by", o.SettledBy},
	} {
		if err := t.Append([]string{s.Label.Render(row[0]), planner.Printable(row[1], 256)}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	result := s.Warn.Render(o.Result)
	if !o.Changed {
		result = s.Dim.Render(o.Result)
	}
	line := fmt.Sprintf("\nskip: seq %d of lane %s %s", o.Seq, o.Lane, result)
	if o.Detail != "" {
		line += " (" + planner.Printable(o.Detail, 512) + ")"
	}
	if o.DryRun {
		line += "\n(dry run: nothing was changed)"
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// SkipOutcomeJSON writes lanes skip's outcome as one JSON document.
func SkipOutcomeJSON(w io.Writer, o *actions.SkipOutcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
