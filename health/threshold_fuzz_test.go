package health

import (
	"strings"
	"testing"
)

// FuzzParseThreshold: any --fail-on expression is parsed or refused with a
// message quoting it; a parsed one is judged against a report without
// panicking, and parses again the same from its own text.
func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"backlog>1000", "severity>=warning", "lag>5m", "skew>=1.5", "pending", ">3", "ack_age<=-1s", "findings!=0", "x==", "unavailable=0"} {
		f.Add(s)
	}
	r := &Report{Lanes: []Lane{{Name: "a", State: StateOK, Backlog: 5, AckPending: 1}}, Findings: []Finding{{Severity: Warning, Code: "x"}}}
	r.Summarize()
	f.Fuzz(func(t *testing.T, expr string) {
		th, err := ParseThreshold(expr)
		if err != nil {
			if !strings.Contains(err.Error(), "write") && !strings.Contains(err.Error(), "unknown") && !strings.Contains(err.Error(), "needs") && !strings.Contains(err.Error(), "no value") {
				t.Fatalf("%q: unhelpful error %v", expr, err)
			}
			return
		}
		Check(r, []Threshold{th})
		again, err := ParseThreshold(th.Expr)
		if err != nil || again.op != th.op || again.metric.name != th.metric.name || again.value != th.value {
			t.Fatalf("%q parses as %+v, its text %q as %+v (%v)", expr, th, th.Expr, again, err)
		}
	})
}
