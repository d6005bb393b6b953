package health

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseThreshold(t *testing.T) {
	good := map[string]string{
		"backlog>1000":      "backlog > 1000",
		" ack_age >= 2m ":   "ack_age >= 120",
		"redelivered>0":     "redelivered > 0",
		"severity>=warning": "severity >= 1",
		"severity=critical": "severity == 2",
		"skew>1.5":          "skew > 1.5",
		"lag<=90s":          "lag <= 90",
		"pending!=0":        "pending != 0",
		"TOTAL_BACKLOG>10":  "total_backlog > 10",
		"unavailable>0":     "unavailable > 0",
		"findings>=3":       "findings >= 3",
		"waiting<1":         "waiting < 1",
		"ack_pending==1":    "ack_pending == 1",
	}
	for expr, want := range good {
		th, err := ParseThreshold(expr)
		if err != nil {
			t.Errorf("%q: %v", expr, err)
			continue
		}
		if got := th.metric.name + " " + th.op + " " + strconv.FormatFloat(th.value, 'g', -1, 64); got != want {
			t.Errorf("%q parsed as %q, want %q", expr, got, want)
		}
	}
	bad := map[string]string{
		"":              "METRIC OP VALUE",
		"backlog":       "METRIC OP VALUE",
		">5":            "METRIC OP VALUE",
		"backlog>":      "no value",
		"backlog=>5":    "whole number",
		"backlog>-1":    "whole number",
		"backlog>1.5":   "whole number",
		"lag>5":         "duration",
		"speed>1":       "unknown metric",
		"severity>=bad": "unknown severity",
		"skew>x":        "number",
		"backlog!5":     "unknown operator",
	}
	for expr, want := range bad {
		if _, err := ParseThreshold(expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", expr, err, want)
		}
	}
}

func TestCheckThresholds(t *testing.T) {
	at := time.Now()
	r := &Report{Lanes: []Lane{
		{Name: "a", State: StateOK, Backlog: 5, At: at},
		{Name: "b", State: StateOK, Backlog: 50, AckPending: 1, LastDelivery: at.Add(-3 * time.Minute), At: at,
			Head: &Head{Time: at.Add(-10 * time.Minute)}},
		{Name: "c", State: StateMissing, Backlog: 500},
	}, Findings: []Finding{{Severity: Warning, Code: "no_workers", Lane: "a"}, {Severity: Info, Code: "catch_all", Lane: "audit"}, {Severity: Info, Code: "retired"}}}
	r.Summarize()
	parse := func(exprs ...string) []Threshold {
		var out []Threshold
		for _, e := range exprs {
			th, err := ParseThreshold(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, th)
		}
		return out
	}
	// Every line names the lane and the value that crossed (docs/inspect.md).
	cases := map[string]string{
		"backlog>10":         "lane b has backlog 50",
		"backlog>1":          "lane b has backlog 50 (and 1 more lane)",
		"backlog>100":        "", // the missing lane has no figures
		"ack_age>2m":         "lane b has ack_age 3m0s",
		"ack_age>5m":         "",
		"lag>9m":             "lane b has lag 10m0s",
		"severity>=warning":  "lane a has a warning finding (no_workers)",
		"severity>=info":     "lane a has a warning finding (no_workers) (and 2 more finding(s))",
		"severity<warning":   "consumer audit has an info finding (catch_all) (and 1 more finding(s))",
		"severity>=critical": "",
		"unavailable>0":      "unavailable is 1 (lane c)",
		"total_backlog>54":   "total_backlog is 55 (most on lane b: 50)",
		"skew>1.5":           "skew is 1.82 (lane b: backlog 50, mean 27.5)",
		"findings>=3":        "findings is 3 (the worst: lane a has a warning finding (no_workers))",
	}
	for expr, want := range cases {
		b := Check(r, parse(expr))
		switch {
		case want == "" && len(b) > 0:
			t.Errorf("%s should not be crossed: %+v", expr, b)
		case want != "" && (len(b) != 1 || b[0].Detail != want):
			t.Errorf("%s: got %+v, want %q", expr, b, want)
		}
	}
}

func TestCollideAndRanges(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a.b.c", "a.b.c", true}, {"a.*.c", "a.b.c", true}, {"a.>", "a.b.c", true}, {">", "x", true},
		{"a.b", "a.b.c", false}, {"a.b.d", "a.b.c", false}, {"a.n8.3.*", "a.n8.4.*", false}, {"a.n8.*.*", "a.n8.4.*", true},
	} {
		if got := collide(c.a, c.b); got != c.want {
			t.Errorf("collide(%s, %s) = %v", c.a, c.b, got)
		}
	}
	if got := ranges([]int{7, 0, 1, 2, 3, 9, 10}); got != "0-3, 7, 9-10" {
		t.Errorf("ranges: %s", got)
	}
}
