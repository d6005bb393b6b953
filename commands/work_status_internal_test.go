package commands

import (
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/work"
)

// TestStatusTextOutage: the terminal's status line shows a handler
// outage: for how long, on how many lanes, why (cut).
func TestStatusTextOutage(t *testing.T) {
	st := work.Stats{Instance: "one", Serving: 2, Lanes: 2, Members: 1, Outages: 2,
		OutageSince: time.Now().Add(-12 * time.Second), OutageReason: "the handler could not run: exit 127, command not found: " + strings.Repeat("x", 200)}
	got := statusText(st, 0)
	if !strings.Contains(got, " · handler outage for 12s on 2 lanes: the handler could not run: exit 127") || len(got) > 250 {
		t.Errorf("status line %q", got)
	}
	if got := statusText(work.Stats{Instance: "one"}, 0); strings.Contains(got, "outage") {
		t.Errorf("status line without an outage %q", got)
	}
}
