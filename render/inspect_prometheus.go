package render

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/membership"
)

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
	{"lanes_lane_keys_in_flight", "The keys the lane runs at once, as its lanes tag says: 1 for a serial lane, K for a key-parallel one (lanes it created).", "gauge", func(l health.Lane) (float64, bool) {
		return float64(l.KeysInFlight), l.KeysInFlight > 0
	}},
	{"lanes_lane_window_held", "Messages a key-parallel lane's lanes work instance holds out of its keys in flight: running, or waiting behind their key (its last record).", "gauge", func(l health.Lane) (float64, bool) {
		w := l.Window()
		return float64(windowHeld(w)), w != nil
	}},
	{"lanes_lane_keys_running", "Keys of a key-parallel lane with a message running (its lanes work instance's last record).", "gauge", func(l health.Lane) (float64, bool) {
		w := l.Window()
		return float64(keysRunning(w)), w != nil
	}},
	{"lanes_lane_oldest_waiting_seconds", "How long the message of a key-parallel lane that has waited longest for its key's earlier one has waited (0 when none waits).", "gauge", func(l health.Lane) (float64, bool) {
		_, waited, _ := l.OldestWaiting()
		return waited.Seconds(), l.Window() != nil
	}},
	{"lanes_lane_served_seconds", "Time since the lanes work instance serving the lane took it (lanes with a live instance).", "gauge", func(l health.Lane) (float64, bool) {
		if l.Server == nil || l.Server.Gone {
			return 0, false
		}
		d, ok := sinceTime(l.At, l.Server.Since)
		return d.Seconds(), ok
	}},
	{"lanes_lane_instance_gone", "1 when the lanes work instance that served the lane is gone and nobody took the lane.", "gauge", func(l health.Lane) (float64, bool) {
		return bool01(l.Server != nil && l.Server.Gone), l.Server != nil
	}},
}

func windowHeld(w *membership.Window) int {
	if w == nil {
		return 0
	}
	return w.Held
}

func keysRunning(w *membership.Window) int {
	if w == nil {
		return 0
	}
	return w.RunningCount
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
	writeWorkerSeries(b, stream, r)
	writeWanted(b, stream, r)
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

// writeWorkerSeries: which instance serves each lane (an info-style
// series, value 1, the instance as a label), live instances and parked
// messages per design.
func writeWorkerSeries(b io.Writer, stream string, r *health.Report) {
	fmt.Fprintf(b, "# HELP lanes_lane_served_by The lanes work instance serving the lane (value 1; its lease is live).\n# TYPE lanes_lane_served_by gauge\n")
	for _, l := range r.Lanes {
		if l.Server != nil && !l.Server.Gone {
			fmt.Fprintf(b, "lanes_lane_served_by{%s,design=\"%s\",lane=\"%s\",partition=\"%s\",instance=\"%s\"} 1\n", stream,
				promEscape(l.Design), promEscape(l.Name), partitionLabel(l.Partition), promEscape(l.Server.Instance))
		}
	}
	fmt.Fprintf(b, "# HELP lanes_lane_running_seconds How long the message lanes work records as running far longer than the lane's usual processing time has run.\n# TYPE lanes_lane_running_seconds gauge\n")
	for _, l := range r.Lanes {
		if l.Server != nil && !l.Server.Gone && l.Server.Running != nil {
			fmt.Fprintf(b, "lanes_lane_running_seconds{%s,design=\"%s\",lane=\"%s\",partition=\"%s\",instance=\"%s\"} %g\n", stream,
				promEscape(l.Design), promEscape(l.Name), partitionLabel(l.Partition), promEscape(l.Server.Instance), max(l.At.Sub(l.Server.Running.Since), 0).Seconds())
		}
	}
	fmt.Fprintf(b, "# HELP lanes_lane_handler_outage_seconds How long the lanes work instance serving the lane has not been able to run its handler at all.\n# TYPE lanes_lane_handler_outage_seconds gauge\n")
	for _, l := range r.Lanes {
		if l.Server != nil && !l.Server.Gone && l.Server.Outage != nil {
			fmt.Fprintf(b, "lanes_lane_handler_outage_seconds{%s,design=\"%s\",lane=\"%s\",partition=\"%s\",instance=\"%s\"} %g\n", stream,
				promEscape(l.Design), promEscape(l.Name), partitionLabel(l.Partition), promEscape(l.Server.Instance), max(l.At.Sub(l.Server.Outage.Since), 0).Seconds())
		}
	}
	fmt.Fprintf(b, "# HELP lanes_workers Live lanes work instances of the design.\n# TYPE lanes_workers gauge\n")
	for _, w := range r.Workers {
		fmt.Fprintf(b, "lanes_workers{%s,design=\"%s\"} %d\n", stream, promEscape(w.Design), len(w.Live))
	}
	fmt.Fprintf(b, "# HELP lanes_parked_messages Messages on a dead-letter subject the design's workers park on.\n# TYPE lanes_parked_messages gauge\n")
	for _, w := range r.Workers {
		for _, p := range w.Parked {
			if p.Err == "" && p.Stream != "" {
				fmt.Fprintf(b, "lanes_parked_messages{%s,design=\"%s\",subject=\"%s\"} %d\n", stream, promEscape(w.Design), promEscape(p.Subject), p.Count)
			}
		}
	}
}

// wantedHelp is the HELP of lanes_work_instances_wanted: inspect writes
// it as lanes work --metrics does, the same name and meaning.
const wantedHelp = "Instances of lanes work the design's backlog can keep busy, for autoscaling: " +
	"one per lane with messages to run (pending or unacknowledged, not paused), at least 1, at most the lane count " +
	"(an instance serves a lane alone: more instances than lanes get none)."

// writeWanted: the autoscaling figure per design (health.Report.Wanted).
func writeWanted(b io.Writer, stream string, r *health.Report) {
	fmt.Fprintf(b, "# HELP lanes_work_instances_wanted %s\n# TYPE lanes_work_instances_wanted gauge\n", wantedHelp)
	for _, w := range r.Wanted() {
		fmt.Fprintf(b, "lanes_work_instances_wanted{%s,design=\"%s\"} %d\n", stream, promEscape(w.Design), w.Instances)
	}
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
