package render

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/planner"
)

// Outcome shows what an operator's action did (or, in a dry run, would
// do) to each lane, then one line that sums it up.
func Outcome(w io.Writer, s Styles, o *actions.Outcome) error {
	t := newTable(w, "LANE", "BEFORE", "AFTER", "")
	for _, c := range o.Lanes {
		mark := s.Dim.Render("unchanged")
		if c.Changed {
			mark = s.Warn.Render("changed")
			if o.DryRun {
				mark = s.Warn.Render("would change")
			}
		}
		if err := t.Append([]string{planner.Printable(c.Lane, 256), planner.Printable(c.Before, 256), planner.Printable(c.After, 256), mark}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	verb := "changed"
	if o.DryRun {
		verb = "would change (dry run: nothing was changed)"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d of %d lane(s) of %s on %s %s\n", o.Action, o.Changed, len(o.Lanes), planner.Printable(o.Design, 256), o.Stream, verb)
	return err
}

// OutcomeJSON writes an action's outcome as one JSON document.
func OutcomeJSON(w io.Writer, o *actions.Outcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
