package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/health"
)

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
	Workers         []workersDoc `json:"workers,omitempty"`
	WorkersUnknown  string       `json:"workers_unknown,omitempty"`
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
	Name                  string      `json:"name"`
	Design                string      `json:"design"`
	Generation            string      `json:"generation,omitempty"`
	Partition             int         `json:"partition"`
	Partitions            int         `json:"partitions"`
	Filter                string      `json:"filter"`
	CreatedByLanes        bool        `json:"created_by_lanes"`
	State                 string      `json:"state"`
	Reason                string      `json:"reason,omitempty"`
	Pending               uint64      `json:"pending"`
	AckPending            int         `json:"ack_pending"`
	MaxAckPending         int         `json:"max_ack_pending"`
	AtCap                 bool        `json:"at_cap"`
	Redelivered           int         `json:"redelivered"`
	Waiting               int         `json:"waiting"`
	Backlog               uint64      `json:"backlog"`
	DeliveredStreamSeq    uint64      `json:"delivered_stream_seq"`
	AckFloorStreamSeq     uint64      `json:"ack_floor_stream_seq"`
	DeliveredConsumerSeq  uint64      `json:"delivered_consumer_seq"`
	AckFloorConsumerSeq   uint64      `json:"ack_floor_consumer_seq"`
	LagSeconds            *float64    `json:"lag_seconds,omitempty"`
	Head                  *headDoc    `json:"head,omitempty"`
	HeadDeliveries        int         `json:"head_deliveries,omitempty"`
	LastDelivery          *time.Time  `json:"last_delivery,omitempty"`
	SinceDeliverySeconds  *float64    `json:"since_delivery_seconds,omitempty"`
	LastAck               *time.Time  `json:"last_ack,omitempty"`
	SinceAckSeconds       *float64    `json:"since_ack_seconds,omitempty"`
	AckPolicy             string      `json:"ack_policy,omitempty"`
	AckWaitSeconds        float64     `json:"ack_wait_seconds"`
	MaxDeliver            int         `json:"max_deliver"`
	PinnedTTLSeconds      float64     `json:"pinned_ttl_seconds,omitempty"`
	PinnedClient          string      `json:"pinned_client,omitempty"`
	PinnedSince           *time.Time  `json:"pinned_since,omitempty"`
	Paused                bool        `json:"paused"`
	PauseRemainingSeconds float64     `json:"pause_remaining_seconds,omitempty"`
	PausedBy              *pauseDoc   `json:"paused_by,omitempty"`
	Held                  string      `json:"held,omitempty"`
	Leader                string      `json:"leader,omitempty"`
	ServedBy              string      `json:"served_by,omitempty"`
	ServedSince           *time.Time  `json:"served_since,omitempty"`
	ServedByGone          bool        `json:"served_by_gone,omitempty"`
	ServedByReleased      bool        `json:"served_by_released,omitempty"`
	Running               *runningDoc `json:"running,omitempty"`
	Outage                *outageDoc  `json:"handler_outage,omitempty"`
	KeysInFlight          int         `json:"keys_in_flight,omitempty"`
	Window                *windowDoc  `json:"window,omitempty"`
	DeliveredPerSecond    *float64    `json:"delivered_per_second,omitempty"`
	AckedPerSecond        *float64    `json:"acked_per_second,omitempty"`
}

// runningDoc is a message lanes work records as running far longer than
// its lane's usual processing time.
type runningDoc struct {
	Seq          uint64    `json:"seq"`
	Attempt      int       `json:"attempt"`
	Since        time.Time `json:"since"`
	Seconds      float64   `json:"seconds"`
	UsualSeconds float64   `json:"usual_seconds,omitempty"`
}

// outageDoc: lanes work cannot run its handler for the lane's message.
type outageDoc struct {
	Since   time.Time `json:"since"`
	Seconds float64   `json:"seconds"`
	Tries   int       `json:"tries"`
	Reason  string    `json:"reason"`
}

// windowDoc is a key-parallel lane's window as the lanes work instance
// serving it last recorded it.
type windowDoc struct {
	Size         int         `json:"size"`
	Held         int         `json:"held"`
	Keys         int         `json:"keys"`
	RunningCount int         `json:"running_count"`
	Running      []string    `json:"running,omitempty"`
	Holder       string      `json:"holder,omitempty"`
	Oldest       *waitingDoc `json:"oldest_waiting,omitempty"`
	At           time.Time   `json:"at"`
}

type waitingDoc struct {
	Key     string    `json:"key"`
	Seq     uint64    `json:"seq"`
	Since   time.Time `json:"since"`
	Seconds float64   `json:"seconds"`
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

// workersDoc is one design's lanes work instances, from the membership bucket.
type workersDoc struct {
	Design string        `json:"design"`
	Live   []instanceDoc `json:"live"`
	Gone   []instanceDoc `json:"gone"`
	Parked []parkedDoc   `json:"parked"`
	// Quarantined are the keys lanes work quarantined, with their first
	// failure (--on-poison quarantine); left out when there are none, so
	// documents of designs without quarantine stay as they were.
	Quarantined []quarantinedDoc `json:"quarantined,omitempty"`
}

type quarantinedDoc struct {
	Key      string    `json:"key"`
	Lane     string    `json:"lane"`
	Seq      uint64    `json:"seq"`
	At       time.Time `json:"at"`
	Instance string    `json:"instance"`
	Error    string    `json:"error,omitempty"`
	State    string    `json:"state"`
}

type instanceDoc struct {
	Instance   string     `json:"instance"`
	Host       string     `json:"host,omitempty"`
	PID        int        `json:"pid,omitempty"`
	Started    *time.Time `json:"started,omitempty"`
	DeadLetter string     `json:"dead_letter,omitempty"`
	// Renewed is the last lease renewal of a live instance; GoneAt when a
	// gone one left or its lease expired (LeaseExpired).
	Renewed      *time.Time `json:"renewed,omitempty"`
	GoneAt       *time.Time `json:"gone_at,omitempty"`
	LeaseExpired bool       `json:"lease_expired,omitempty"`
}

type parkedDoc struct {
	Subject string `json:"subject"`
	Stream  string `json:"stream,omitempty"` // empty: no stream stores the subject
	Count   uint64 `json:"count"`
	Error   string `json:"error,omitempty"`
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
	d.WorkersUnknown = r.WorkersUnknown
	for _, w := range r.Workers {
		wd := workersDoc{Design: w.Design, Live: []instanceDoc{}, Gone: []instanceDoc{}, Parked: []parkedDoc{}}
		for _, q := range w.Quarantined {
			wd.Quarantined = append(wd.Quarantined, quarantinedDoc{q.Key, q.Lane, q.Seq, q.At.UTC(), q.Instance, q.Error, q.State})
		}
		for _, in := range w.Live {
			wd.Live = append(wd.Live, instanceDoc{Instance: in.Instance, Host: in.Host, PID: in.PID, Started: timePtr(in.Started), DeadLetter: in.DeadLetter, Renewed: timePtr(in.Renewed)})
		}
		for _, in := range w.Gone {
			wd.Gone = append(wd.Gone, instanceDoc{Instance: in.Instance, GoneAt: timePtr(in.Renewed), LeaseExpired: in.Expired})
		}
		for _, p := range w.Parked {
			wd.Parked = append(wd.Parked, parkedDoc{p.Subject, p.Stream, p.Count, p.Err})
		}
		d.Workers = append(d.Workers, wd)
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
	if p := l.PausedBy; p != nil {
		j.PausedBy = &pauseDoc{By: p.By, At: p.At, Until: timePtr(p.Until), Reason: p.Reason}
	}
	if l.Partitions > 0 {
		j.Generation = l.Generation()
	}
	if l.Server != nil {
		j.ServedBy, j.ServedSince, j.ServedByGone = l.Server.Instance, timePtr(l.Server.Since), l.Server.Gone
		j.ServedByReleased = l.Server.Released
		if o := l.Server.Outage; o != nil && !l.Server.Gone {
			j.Outage = &outageDoc{Since: o.Since.UTC(), Seconds: max(l.At.Sub(o.Since), 0).Seconds(), Tries: o.Tries, Reason: o.Reason}
		}
		if in := l.Server.Running; in != nil && !l.Server.Gone {
			j.Running = &runningDoc{Seq: in.Seq, Attempt: in.Attempt, Since: in.Since.UTC(),
				Seconds: max(l.At.Sub(in.Since), 0).Seconds(), UsualSeconds: in.Usual.Seconds()}
		}
	}
	j.KeysInFlight = l.KeysInFlight
	if w := l.Window(); w != nil {
		j.Window = &windowDoc{Size: w.Size, Held: w.Held, Keys: w.Keys, RunningCount: w.RunningCount,
			Running: w.Running, Holder: w.Holder, At: w.At.UTC()}
		if oldest, waited, ok := l.OldestWaiting(); ok {
			j.Window.Oldest = &waitingDoc{Key: oldest.Key, Seq: oldest.Seq, Since: oldest.Since.UTC(), Seconds: waited.Seconds()}
		}
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

// pauseDoc is who paused a lane with lanes pause (until: absent when
// until resumed).
type pauseDoc struct {
	By     string     `json:"by"`
	At     time.Time  `json:"at"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
}
