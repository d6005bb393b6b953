package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/health"
)

// InspectTable prints the lane report: a stream line, one row per lane with
// a backlog bar, the summary, and the findings with their advice.
func InspectTable(w io.Writer, s Styles, r *health.Report) error {
	inspectHeading(w, s, r)
	fmt.Fprintln(w)
	if len(r.Lanes) == 0 {
		fmt.Fprintln(w, s.Warn.Render("No lanes."))
	} else if err := laneTable(w, s, r); err != nil {
		return err
	}
	fmt.Fprintln(w)
	inspectSummary(w, s, r)
	fmt.Fprintln(w)
	Findings(w, s, r.Findings)
	return nil
}

func inspectHeading(w io.Writer, s Styles, r *health.Report) {
	fmt.Fprintln(w, s.Heading.Render(fmt.Sprintf("Stream %s: last seq %d, %d messages, %d consumers", r.Stream, r.LastSeq, r.Messages, r.Consumers)))
	for _, l := range r.Layouts {
		where := map[string]string{"design": "design file", "stream": "stream subject transform", "lanes": "lane metadata"}[l.Origin]
		if l.Current {
			where += ", current"
		}
		s.kv(w, [][2]string{{"mapping", fmt.Sprintf("%s -> %s (%s)", l.Source, l.Destination, where)}})
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
		{"LANE", func(l health.Lane) string { return l.Name }, always},
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
		{"LAG", ok(func(l health.Lane) string { return optDuration(l.Age()) }), always},
		{"LAST DELIV", ok(func(l health.Lane) string { return optDuration(l.SinceDelivery()) }), always},
		{"LAST ACK", ok(func(l health.Lane) string { return optDuration(l.SinceAck()) }), always},
		{"DELIV/S", ok(func(l health.Lane) string { return rateText(l.DeliveredRate) }), func(r *health.Report) bool { return r.Interval > 0 }},
		{"ACK/S", ok(func(l health.Lane) string { return rateText(l.AckedRate) }), func(r *health.Report) bool { return r.Interval > 0 }},
		{"PINNED", ok(pinnedText), anyLane(func(l health.Lane) bool { return l.PinnedTTL > 0 })},
		{"LEADER", func(l health.Lane) string { return dash(l.Leader) }, anyLane(func(l health.Lane) bool { return l.Leader != "" })},
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
	id := l.PinnedClient
	if len(id) > 8 {
		id = id[:8]
	}
	if d, ok := sinceTime(l.At, l.PinnedSince); ok {
		return fmt.Sprintf("%s (%s)", id, shortDuration(d))
	}
	return id
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

func rateText(v float64) string {
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

func optDuration(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return shortDuration(d)
}

// shortDuration is a duration for a table cell: 850ms, 12s, 3m12s, 2h5m, 3d4h.
func shortDuration(d time.Duration) string {
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
	s.kv(w, [][2]string{
		{"lanes", lanes},
		{"backlog", backlog},
		{"findings", fmt.Sprintf("%d critical, %d warning, %d info", m.Critical, m.Warnings, m.Infos)},
	})
}

// findingsPerCode bounds the table's findings of one code: with 1,024
// lanes without workers, five lines say it; JSON lists every one.
const findingsPerCode = 5

// Findings prints findings under a heading, each with its advice.
func Findings(w io.Writer, s Styles, fs []health.Finding) {
	if len(fs) == 0 {
		fmt.Fprintln(w, s.Good.Render("No findings: the lanes look healthy."))
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
		fmt.Fprintf(w, "  %s%s  %s: %s\n", label, pad, f.Code, f.Message)
		fmt.Fprintf(w, "  %s  %s\n", strings.Repeat(" ", len("CRITICAL")), s.Dim.Render("-> "+f.Advice))
	}
}

// KeyPlaces prints where a key's messages go, before its lane's report.
func KeyPlaces(w io.Writer, s Styles, places []health.KeyPlace) {
	for _, p := range places {
		lanes := "no lane (a gap: its messages are never delivered)"
		if len(p.Lanes) > 0 {
			lanes = "lane " + s.Heading.Render(strings.Join(p.Lanes, ", "))
		}
		state := ""
		if !p.Layout.Current && len(places) > 1 {
			state = " (older partitioning: its earlier messages drain here)"
		}
		fmt.Fprintf(w, "%s (key %s) is in partition %d of %s: %s%s\n", p.Subject, p.Key, p.Partition, p.Layout.Destination, lanes, state)
		s.kv(w, [][2]string{{"stored as", p.Stored}})
	}
	fmt.Fprintln(w)
}

// WatchHeader is the first line of each watch refresh; problem, when not
// empty, says why this refresh has no fresh figures (e.g. reconnecting).
func WatchHeader(w io.Writer, s Styles, at time.Time, every time.Duration, problem string) {
	line := fmt.Sprintf("%s  every %s  (Ctrl-C to stop)", at.Format("15:04:05"), every)
	fmt.Fprintln(w, s.Dim.Render(line))
	if problem != "" {
		fmt.Fprintln(w, s.Warn.Render(problem))
	}
}

// Inspect JSON: built from these types so field names stay stable for
// scripts whatever the libraries do.
type inspectDoc struct {
	Stream          string       `json:"stream"`
	Time            time.Time    `json:"time"`
	StreamLastSeq   uint64       `json:"stream_last_seq"`
	StreamMessages  uint64       `json:"stream_messages"`
	StreamSubjects  int          `json:"stream_subjects"`
	MaxConsumers    int          `json:"max_consumers"`
	Consumers       int          `json:"consumers"`
	Layouts         []mappingDoc `json:"layouts"`
	Key             []keyDoc     `json:"key,omitempty"`
	Lanes           []laneJSON   `json:"lanes"`
	Summary         summaryDoc   `json:"summary"`
	Findings        []findingDoc `json:"findings"`
	Requests        int          `json:"requests"`
	IntervalSeconds float64      `json:"interval_seconds,omitempty"`
}

type mappingDoc struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Partitions  int    `json:"partitions"`
	Origin      string `json:"origin"`
	Current     bool   `json:"current"`
}

type keyDoc struct {
	Subject     string   `json:"subject"`
	Key         string   `json:"key"`
	Destination string   `json:"destination"`
	Current     bool     `json:"current"`
	Partition   int      `json:"partition"`
	Stored      string   `json:"stored_subject"`
	Lanes       []string `json:"lanes"`
}

type laneJSON struct {
	Name                  string     `json:"name"`
	Design                string     `json:"design"`
	Generation            string     `json:"generation,omitempty"`
	Partition             int        `json:"partition"`
	Partitions            int        `json:"partitions"`
	Filter                string     `json:"filter"`
	CreatedByLanes        bool       `json:"created_by_lanes"`
	State                 string     `json:"state"`
	Reason                string     `json:"reason,omitempty"`
	Pending               uint64     `json:"pending"`
	AckPending            int        `json:"ack_pending"`
	MaxAckPending         int        `json:"max_ack_pending"`
	AtCap                 bool       `json:"at_cap"`
	Redelivered           int        `json:"redelivered"`
	Waiting               int        `json:"waiting"`
	Backlog               uint64     `json:"backlog"`
	DeliveredStreamSeq    uint64     `json:"delivered_stream_seq"`
	AckFloorStreamSeq     uint64     `json:"ack_floor_stream_seq"`
	DeliveredConsumerSeq  uint64     `json:"delivered_consumer_seq"`
	AckFloorConsumerSeq   uint64     `json:"ack_floor_consumer_seq"`
	LagSeconds            *float64   `json:"lag_seconds,omitempty"`
	Head                  *headDoc   `json:"head,omitempty"`
	HeadDeliveries        int        `json:"head_deliveries,omitempty"`
	LastDelivery          *time.Time `json:"last_delivery,omitempty"`
	SinceDeliverySeconds  *float64   `json:"since_delivery_seconds,omitempty"`
	LastAck               *time.Time `json:"last_ack,omitempty"`
	SinceAckSeconds       *float64   `json:"since_ack_seconds,omitempty"`
	AckPolicy             string     `json:"ack_policy,omitempty"`
	AckWaitSeconds        float64    `json:"ack_wait_seconds"`
	MaxDeliver            int        `json:"max_deliver"`
	PinnedTTLSeconds      float64    `json:"pinned_ttl_seconds,omitempty"`
	PinnedClient          string     `json:"pinned_client,omitempty"`
	PinnedSince           *time.Time `json:"pinned_since,omitempty"`
	Paused                bool       `json:"paused"`
	PauseRemainingSeconds float64    `json:"pause_remaining_seconds,omitempty"`
	Held                  string     `json:"held,omitempty"`
	Leader                string     `json:"leader,omitempty"`
	DeliveredPerSecond    *float64   `json:"delivered_per_second,omitempty"`
	AckedPerSecond        *float64   `json:"acked_per_second,omitempty"`
}

type headDoc struct {
	Seq     uint64    `json:"seq"`
	Subject string    `json:"subject"`
	Key     string    `json:"key,omitempty"`
	Time    time.Time `json:"time"`
}

type summaryDoc struct {
	Lanes        int     `json:"lanes"`
	Unavailable  int     `json:"unavailable"`
	TotalBacklog uint64  `json:"total_backlog"`
	MaxBacklog   uint64  `json:"max_backlog"`
	MeanBacklog  float64 `json:"mean_backlog"`
	MaxToMean    float64 `json:"max_to_mean"`
	Hottest      string  `json:"hottest_lane,omitempty"`
	AtCap        int     `json:"at_cap"`
	Paused       int     `json:"paused"`
	Critical     int     `json:"critical"`
	Warnings     int     `json:"warnings"`
	Infos        int     `json:"infos"`
}

type findingDoc struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Lane     string `json:"lane"`
	Message  string `json:"message"`
	Advice   string `json:"advice"`
}

// InspectJSON writes the report as one JSON document; places, when given,
// answer --key.
// The document has one lane (and one finding) per line: readable and
// greppable, and several times cheaper to write than indenting every field
// of thousands of lanes.
func InspectJSON(w io.Writer, r *health.Report, places []health.KeyPlace) error {
	return lineJSON(w, inspectDocument(r, places))
}

// InspectJSONLine writes the report as one line of JSON, for watch mode
// (one document per refresh).
func InspectJSONLine(w io.Writer, r *health.Report) error {
	return compactJSON(w, inspectDocument(r, nil))
}

func compactJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// lineJSON writes a struct as a JSON object with one top-level field per
// line and, for array fields, one compact element per line. Field names and
// omitempty come from the struct's json tags.
func lineJSON(w io.Writer, doc any) error {
	b := bufio.NewWriterSize(w, 64<<10)
	v := reflect.ValueOf(doc)
	t := v.Type()
	b.WriteString("{")
	first := true
	for i := 0; i < t.NumField(); i++ {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		f := v.Field(i)
		if opts == "omitempty" && f.IsZero() {
			continue
		}
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(b, "\n  %q: ", name)
		if f.Kind() != reflect.Slice {
			if err := writeCompact(b, f.Interface()); err != nil {
				return err
			}
			continue
		}
		b.WriteString("[")
		for j := 0; j < f.Len(); j++ {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n    ")
			if err := writeCompact(b, f.Index(j).Interface()); err != nil {
				return err
			}
		}
		if f.Len() > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString("]")
	}
	b.WriteString("\n}\n")
	return b.Flush()
}

// writeCompact writes v as compact JSON, with '>' and '<' as they are
// (subjects contain them; json.Marshal would escape them for HTML).
func writeCompact(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return err
}

func inspectDocument(r *health.Report, places []health.KeyPlace) inspectDoc {
	d := inspectDoc{
		Stream: r.Stream, Time: r.Time.UTC(), StreamLastSeq: r.LastSeq, StreamMessages: r.Messages, StreamSubjects: r.Subjects,
		MaxConsumers: r.MaxConsumers, Consumers: r.Consumers, Requests: r.Requests, IntervalSeconds: r.Interval.Seconds(),
		Layouts: []mappingDoc{}, Lanes: make([]laneJSON, 0, len(r.Lanes)), Findings: make([]findingDoc, 0, len(r.Findings)),
	}
	for _, l := range r.Layouts {
		d.Layouts = append(d.Layouts, mappingDoc{l.Source, l.Destination, l.Partitions, l.Origin, l.Current})
	}
	for _, p := range places {
		d.Key = append(d.Key, keyDoc{Subject: p.Subject, Key: p.Key, Destination: p.Layout.Destination, Current: p.Layout.Current,
			Partition: p.Partition, Stored: p.Stored, Lanes: append([]string{}, p.Lanes...)})
	}
	for _, l := range r.Lanes {
		d.Lanes = append(d.Lanes, laneDocument(l, r.Interval > 0))
	}
	m := r.Summary
	d.Summary = summaryDoc{m.Lanes, m.Unavailable, m.TotalBacklog, m.MaxBacklog, m.MeanBacklog, m.MaxToMean, m.Hottest, m.AtCap, m.Paused, m.Critical, m.Warnings, m.Infos}
	for _, f := range r.Findings {
		d.Findings = append(d.Findings, findingDoc{f.Severity.String(), f.Code, f.Lane, f.Message, f.Advice})
	}
	return d
}

func laneDocument(l health.Lane, rates bool) laneJSON {
	j := laneJSON{
		Name: l.Name, Design: l.Design, Partition: l.Partition, Partitions: l.Partitions, Filter: l.Filter,
		CreatedByLanes: l.Tagged, State: string(l.State), Reason: l.Reason,
		Pending: l.Pending, AckPending: l.AckPending, MaxAckPending: l.MaxAckPending, AtCap: l.AtCap(),
		Redelivered: l.Redelivered, Waiting: l.Waiting, Backlog: l.Backlog,
		DeliveredStreamSeq: l.DeliveredSeq, AckFloorStreamSeq: l.AckFloorSeq,
		DeliveredConsumerSeq: l.DeliveredConsumer, AckFloorConsumerSeq: l.AckFloorConsumer,
		HeadDeliveries: l.HeadDeliveries, AckPolicy: l.AckPolicy, AckWaitSeconds: l.AckWait.Seconds(), MaxDeliver: l.MaxDeliver,
		PinnedTTLSeconds: l.PinnedTTL.Seconds(), PinnedClient: l.PinnedClient,
		Paused: l.Paused, PauseRemainingSeconds: l.PauseRemaining.Seconds(), Held: l.Held, Leader: l.Leader,
		LagSeconds:           seconds(l.Age()),
		SinceDeliverySeconds: seconds(l.SinceDelivery()),
		SinceAckSeconds:      seconds(l.SinceAck()),
		LastDelivery:         timePtr(l.LastDelivery),
		LastAck:              timePtr(l.LastAck),
		PinnedSince:          timePtr(l.PinnedSince),
	}
	if l.Partitions > 0 {
		j.Generation = l.Generation()
	}
	if l.Head != nil {
		j.Head = &headDoc{l.Head.Seq, l.Head.Subject, l.Head.Key, l.Head.Time.UTC()}
	}
	if rates && l.State == health.StateOK {
		j.DeliveredPerSecond, j.AckedPerSecond = &l.DeliveredRate, &l.AckedRate
	}
	return j
}

func seconds(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	v := d.Seconds()
	return &v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// promMetric is one Prometheus gauge or counter per lane.
type promMetric struct {
	name, help, kind string
	value            func(health.Lane) (float64, bool)
}

var laneMetrics = []promMetric{
	{"lanes_lane_up", "1 when the lane's leader answered, 0 when it is missing or offline.", "gauge", nil},
	{"lanes_lane_pending", "Messages of the lane's partition not yet delivered.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.Pending), true }},
	{"lanes_lane_ack_pending", "Messages delivered and not yet acknowledged.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.AckPending), true }},
	{"lanes_lane_max_ack_pending", "Messages the lane may have out at once (1 keeps order).", "gauge", func(l health.Lane) (float64, bool) { return float64(l.MaxAckPending), true }},
	{"lanes_lane_redelivered", "Messages redelivered and not yet acknowledged (not cumulative).", "gauge", func(l health.Lane) (float64, bool) { return float64(l.Redelivered), true }},
	{"lanes_lane_waiting", "Queued pull requests.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.Waiting), true }},
	{"lanes_lane_backlog", "Messages not yet acknowledged: pending plus ack pending.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.Backlog), true }},
	{"lanes_lane_delivered_stream_seq", "Stream sequence of the lane's last delivery.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.DeliveredSeq), true }},
	{"lanes_lane_ack_floor_stream_seq", "Stream sequence up to which the lane has every message acknowledged.", "gauge", func(l health.Lane) (float64, bool) { return float64(l.AckFloorSeq), true }},
	{"lanes_lane_delivered_total", "Deliveries by the lane, redeliveries included (its consumer sequence).", "counter", func(l health.Lane) (float64, bool) { return float64(l.DeliveredConsumer), true }},
	{"lanes_lane_acked_total", "Deliveries acknowledged in order (its ack floor consumer sequence).", "counter", func(l health.Lane) (float64, bool) { return float64(l.AckFloorConsumer), true }},
	{"lanes_lane_lag_seconds", "Age of the lane's oldest unacknowledged message.", "gauge", func(l health.Lane) (float64, bool) { d, ok := l.Age(); return d.Seconds(), ok }},
	{"lanes_lane_since_delivery_seconds", "Time since the lane last delivered a message.", "gauge", func(l health.Lane) (float64, bool) { d, ok := l.SinceDelivery(); return d.Seconds(), ok }},
	{"lanes_lane_since_ack_seconds", "Time since the lane's ack floor last moved.", "gauge", func(l health.Lane) (float64, bool) { d, ok := l.SinceAck(); return d.Seconds(), ok }},
	{"lanes_lane_head_deliveries", "Deliveries of the head message (lanes with max ack pending 1 and a message out).", "gauge", func(l health.Lane) (float64, bool) { return float64(l.HeadDeliveries), true }},
	{"lanes_lane_paused", "1 when the lane is paused (or held for a repartition).", "gauge", func(l health.Lane) (float64, bool) { return bool01(l.Paused), true }},
	{"lanes_lane_pinned", "1 when a worker is pinned to the lane (priority group).", "gauge", func(l health.Lane) (float64, bool) { return bool01(l.PinnedClient != ""), true }},
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// InspectPrometheus writes the report in the Prometheus text exposition
// format: one series per lane and figure, labelled stream, design, lane and
// partition, then stream-wide series and one series per finding.
func InspectPrometheus(w io.Writer, r *health.Report) error {
	b := bufio.NewWriter(w)
	stream := `stream="` + promEscape(r.Stream) + `"`
	for _, m := range laneMetrics {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.kind)
		for _, l := range r.Lanes {
			v, ok := 0.0, true
			switch {
			case m.value == nil:
				v = bool01(l.State == health.StateOK)
			case l.State != health.StateOK:
				ok = false
			default:
				v, ok = m.value(l)
			}
			if ok {
				fmt.Fprintf(b, "%s{%s,design=\"%s\",lane=\"%s\",partition=\"%s\"} %s\n", m.name, stream,
					promEscape(l.Design), promEscape(l.Name), partitionLabel(l.Partition), promValue(v))
			}
		}
	}
	m := r.Summary
	streamSeries := []struct {
		name, help string
		v          float64
	}{
		{"lanes_stream_last_seq", "The stream's last sequence.", float64(r.LastSeq)},
		{"lanes_stream_messages", "Messages stored in the stream.", float64(r.Messages)},
		{"lanes_stream_lanes", "Lanes that answered.", float64(m.Lanes)},
		{"lanes_stream_lanes_unavailable", "Lanes missing or offline.", float64(m.Unavailable)},
		{"lanes_stream_backlog", "Backlog of all lanes.", float64(m.TotalBacklog)},
		{"lanes_stream_backlog_max_to_mean", "Largest lane backlog over the mean (1 is even).", m.MaxToMean},
	}
	for _, s := range streamSeries {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %s\n", s.name, s.help, s.name, s.name, stream, promValue(s.v))
	}
	fmt.Fprintf(b, "# HELP lanes_findings Findings by severity.\n# TYPE lanes_findings gauge\n")
	for _, sev := range []struct {
		name string
		n    int
	}{{"critical", m.Critical}, {"warning", m.Warnings}, {"info", m.Infos}} {
		fmt.Fprintf(b, "lanes_findings{%s,severity=\"%s\"} %d\n", stream, sev.name, sev.n)
	}
	fmt.Fprintf(b, "# HELP lanes_finding One series per finding, for alerts on a code.\n# TYPE lanes_finding gauge\n")
	for _, k := range findingSeries(r.Findings) {
		fmt.Fprintf(b, "lanes_finding{%s,severity=\"%s\",code=\"%s\",lane=\"%s\"} %d\n", stream, k.sev, promEscape(k.code), promEscape(k.lane), k.n)
	}
	return b.Flush()
}

type findingKey struct {
	sev, code, lane string
	n               int
}

// findingSeries merges findings with the same labels, so no series repeats.
func findingSeries(fs []health.Finding) []findingKey {
	idx := map[[3]string]int{}
	var out []findingKey
	for _, f := range fs {
		k := [3]string{f.Severity.String(), f.Code, f.Lane}
		if i, ok := idx[k]; ok {
			out[i].n++
			continue
		}
		idx[k] = len(out)
		out = append(out, findingKey{k[0], k[1], k[2], 1})
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].code != out[b].code {
			return out[a].code < out[b].code
		}
		return out[a].lane < out[b].lane
	})
	return out
}

// partitionLabel is empty for a lane whose partition is unknown (a missing
// lane lanes did not name).
func partitionLabel(p int) string {
	if p < 0 {
		return ""
	}
	return strconv.Itoa(p)
}

func promValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// promEscape escapes a label value: backslash, double quote and newline.
func promEscape(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
