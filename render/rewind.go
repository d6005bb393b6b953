package render

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/planner"
)

// Rewind shows a rewind per lane: its position now (ack floor and last
// delivery, stream sequences), after, and how many messages run again;
// then one line that sums it up.
func Rewind(w io.Writer, s Styles, o *actions.RewindOutcome) error {
	t := newTable(w, "LANE", "ACK FLOOR", "DELIVERED", "AFTER", "AGAIN", "")
	for _, l := range o.Lanes {
		after, again, mark := "as now", "0", s.Dim.Render("unchanged")
		if l.Changed {
			after = "ack floor " + strconv.FormatUint(l.To-1, 10)
			again = rewindCount(l.Again)
			mark = s.Warn.Render("rewound")
			if o.DryRun {
				mark = s.Warn.Render("would rewind")
			}
		}
		if l.Note != "" {
			mark += " " + s.Dim.Render(planner.Printable(l.Note, 256))
		}
		row := []string{planner.Printable(l.Lane, 256), strconv.FormatUint(l.AckFloor, 10), strconv.FormatUint(l.Delivered, 10), after, again, mark}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	point := fmt.Sprintf("seq %d", o.Seq)
	if o.Time != nil {
		point = fmt.Sprintf("%s (seq %d)", o.Time.Format(time.RFC3339), o.Seq)
	}
	verb := "rewound"
	if o.DryRun {
		verb = "would be rewound (dry run: nothing was changed)"
	}
	_, err := fmt.Fprintf(w, "\nrewind to %s: %d of %d lane(s) of %s on %s %s; %s message(s) run again\n",
		point, o.Changed, len(o.Lanes), planner.Printable(o.Design, 256), o.Stream, verb, rewindCount(o.Again))
	return err
}

func rewindCount(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.FormatInt(n, 10)
}

// RewindJSON writes a rewind's outcome as one JSON document.
func RewindJSON(w io.Writer, o *actions.RewindOutcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
