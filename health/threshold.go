package health

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Threshold is one --fail-on expression: METRIC OP VALUE, e.g.
// backlog>1000, ack_age>2m, redelivered>0, severity>=warning.
// A lane metric is crossed when any lane crosses it.
type Threshold struct {
	Expr   string
	metric metric
	op     string
	value  float64 // counts, seconds, ratios and severities all compare as numbers
}

type metricKind int

const (
	count metricKind = iota
	duration
	ratio
	severity
)

type metric struct {
	name string
	kind metricKind
	help string
	lane func(Lane) (float64, bool) // per lane; nil for stream-wide metrics
	all  func(*Report) []float64    // stream-wide values (severity: one per finding)
}

var metrics = []metric{
	{name: "pending", kind: count, help: "messages not yet delivered, per lane", lane: func(l Lane) (float64, bool) { return float64(l.Pending), true }},
	{name: "ack_pending", kind: count, help: "messages out and not acknowledged, per lane", lane: func(l Lane) (float64, bool) { return float64(l.AckPending), true }},
	{name: "backlog", kind: count, help: "pending + ack_pending, per lane", lane: func(l Lane) (float64, bool) { return float64(l.Backlog), true }},
	{name: "redelivered", kind: count, help: "messages being redelivered, per lane", lane: func(l Lane) (float64, bool) { return float64(l.Redelivered), true }},
	{name: "waiting", kind: count, help: "queued pull requests, per lane", lane: func(l Lane) (float64, bool) { return float64(l.Waiting), true }},
	{name: "lag", kind: duration, help: "age of the oldest unacknowledged message, per lane", lane: func(l Lane) (float64, bool) { d, ok := l.Age(); return d.Seconds(), ok }},
	{name: "ack_age", kind: duration, help: "time a lane has had a message out without a new delivery", lane: func(l Lane) (float64, bool) { d, ok := l.AckAge(); return d.Seconds(), ok }},
	{name: "total_backlog", kind: count, help: "backlog of all lanes", all: func(r *Report) []float64 { return []float64{float64(r.Summary.TotalBacklog)} }},
	{name: "skew", kind: ratio, help: "largest backlog / mean backlog", all: func(r *Report) []float64 { return []float64{r.Summary.MaxToMean} }},
	{name: "unavailable", kind: count, help: "lanes the server reported missing or offline", all: func(r *Report) []float64 { return []float64{float64(r.Summary.Unavailable)} }},
	{name: "findings", kind: count, help: "number of findings", all: func(r *Report) []float64 { return []float64{float64(len(r.Findings))} }},
	{name: "severity", kind: severity, help: "severity of any finding: info, warning or critical", all: func(r *Report) []float64 {
		out := make([]float64, len(r.Findings))
		for i, f := range r.Findings {
			out[i] = float64(f.Severity)
		}
		return out
	}},
}

func metricNames() string {
	names := make([]string, len(metrics))
	for i, m := range metrics {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// ParseThreshold reads one expression.
func ParseThreshold(expr string) (Threshold, error) {
	t := Threshold{Expr: strings.TrimSpace(expr)}
	i := strings.IndexAny(t.Expr, "<>=!")
	if i <= 0 {
		return t, fmt.Errorf("%q: write METRIC OP VALUE, e.g. backlog>1000 or severity>=warning", expr)
	}
	name := strings.TrimSpace(t.Expr[:i])
	rest := t.Expr[i:]
	for _, op := range []string{">=", "<=", "==", "!=", ">", "<", "="} {
		if strings.HasPrefix(rest, op) {
			t.op, rest = op, strings.TrimSpace(rest[len(op):])
			break
		}
	}
	if t.op == "" {
		return t, fmt.Errorf("%q: unknown operator; use > >= < <= == !=", expr)
	}
	if t.op == "=" {
		t.op = "=="
	}
	found := false
	for _, m := range metrics {
		if m.name == strings.ToLower(name) {
			t.metric, found = m, true
		}
	}
	if !found {
		return t, fmt.Errorf("%q: unknown metric %q; use one of %s", expr, name, metricNames())
	}
	if rest == "" {
		return t, fmt.Errorf("%q: no value after %s", expr, t.op)
	}
	v, err := t.metric.parse(rest)
	if err != nil {
		return t, fmt.Errorf("%q: %v", expr, err)
	}
	t.value = v
	return t, nil
}

func (m metric) parse(s string) (float64, error) {
	switch m.kind {
	case count:
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s needs a whole number, not %q", m.name, s)
		}
		return float64(v), nil
	case duration:
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%s needs a duration like 90s or 2m, not %q", m.name, s)
		}
		return d.Seconds(), nil
	case ratio:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%s needs a number like 1.5, not %q", m.name, s)
		}
		return v, nil
	}
	sev, err := ParseSeverity(s)
	return float64(sev), err
}

func (t Threshold) holds(v float64) bool {
	switch t.op {
	case ">":
		return v > t.value
	case ">=":
		return v >= t.value
	case "<":
		return v < t.value
	case "<=":
		return v <= t.value
	case "==":
		return v == t.value
	}
	return v != t.value
}

// Breach is a threshold a report crossed, with what crossed it.
type Breach struct {
	Expr   string
	Detail string
}

// Check returns the thresholds the report crosses.
func Check(r *Report, ts []Threshold) []Breach {
	var out []Breach
	for _, t := range ts {
		if detail, ok := t.check(r); ok {
			out = append(out, Breach{Expr: t.Expr, Detail: detail})
		}
	}
	return out
}

// check says whether the report crosses the threshold and, if so, which
// lane (or consumer, or the stream) crossed it with what value.
func (t Threshold) check(r *Report) (string, bool) {
	if t.metric.kind == severity {
		return t.checkSeverity(r)
	}
	if t.metric.lane == nil {
		for _, v := range t.metric.all(r) {
			if t.holds(v) {
				return t.metric.name + " is " + t.describe(v) + streamDetail(t.metric.name, r), true
			}
		}
		return "", false
	}
	type hit struct {
		lane string
		v    float64
	}
	var hits []hit
	for _, l := range r.Lanes {
		if l.State != StateOK {
			continue
		}
		if v, ok := t.metric.lane(l); ok && t.holds(v) {
			hits = append(hits, hit{l.Name, v})
		}
	}
	if len(hits) == 0 {
		return "", false
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].v > hits[b].v })
	detail := fmt.Sprintf("lane %s has %s %s", hits[0].lane, t.metric.name, t.describe(hits[0].v))
	if len(hits) > 1 {
		more := "lanes"
		if len(hits) == 2 {
			more = "lane"
		}
		detail += fmt.Sprintf(" (and %d more %s)", len(hits)-1, more)
	}
	return detail, true
}

// checkSeverity names the worst finding that satisfies the threshold.
func (t Threshold) checkSeverity(r *Report) (string, bool) {
	var hits []Finding
	for _, f := range r.Findings {
		if t.holds(float64(f.Severity)) {
			hits = append(hits, f)
		}
	}
	if len(hits) == 0 {
		return "", false
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].Severity > hits[b].Severity })
	detail := findingText(r, hits[0])
	if len(hits) > 1 {
		detail += fmt.Sprintf(" (and %d more finding(s))", len(hits)-1)
	}
	return detail, true
}

// findingText: "lane X has a critical finding (stuck)".
func findingText(r *Report, f Finding) string {
	who := "the stream"
	if r.Stream != "" {
		who = "stream " + r.Stream
	}
	switch {
	case f.Lane != "" && r.Lane(f.Lane) != nil:
		who = "lane " + f.Lane
	case f.Lane != "":
		who = "consumer " + f.Lane
	}
	article := "a"
	if f.Severity == Info {
		article = "an"
	}
	return fmt.Sprintf("%s has %s %s finding (%s)", who, article, f.Severity, f.Code)
}

// streamDetail names the lane behind a stream-wide figure.
func streamDetail(metric string, r *Report) string {
	m := r.Summary
	switch metric {
	case "total_backlog", "skew":
		if m.Hottest == "" {
			return ""
		}
		if metric == "skew" {
			return fmt.Sprintf(" (lane %s: backlog %d, mean %.1f)", m.Hottest, m.MaxBacklog, m.MeanBacklog)
		}
		return fmt.Sprintf(" (most on lane %s: %d)", m.Hottest, m.MaxBacklog)
	case "unavailable":
		var names []string
		for _, l := range r.Lanes {
			if l.State != StateOK {
				names = append(names, l.Name)
			}
		}
		if len(names) == 0 {
			return ""
		}
		if len(names) > 3 {
			names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
		}
		return " (lane " + strings.Join(names, ", ") + ")"
	case "findings":
		if len(r.Findings) == 0 {
			return ""
		}
		worst := r.Findings[0]
		for _, f := range r.Findings {
			if f.Severity > worst.Severity {
				worst = f
			}
		}
		return " (the worst: " + findingText(r, worst) + ")"
	}
	return ""
}

func (t Threshold) describe(v float64) string {
	switch t.metric.kind {
	case duration:
		return fmtDuration(time.Duration(v * float64(time.Second)))
	case ratio:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case severity:
		return "a " + Severity(v).String() + " finding"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
