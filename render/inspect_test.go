package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/membership"
)

// fixedReport is a report with every kind of row, built by hand so the
// golden files never change with the clock or the server.
func fixedReport() *health.Report {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	base := health.Lane{Design: "orders", Partitions: 4, Tagged: true, KeysInFlight: 1, State: health.StateOK, MaxAckPending: 1,
		AckPolicy: "explicit", AckWait: 30 * time.Second, MaxDeliver: -1, Durable: true, At: at, Leader: "n1"}
	lane := func(p int, edit func(*health.Lane)) health.Lane {
		l := base
		l.Partition = p
		l.Name = "orders-n4-0" + string(rune('0'+p))
		l.Filter = "msgs.received_from.n4." + string(rune('0'+p)) + ".*"
		edit(&l)
		l.Backlog = l.Pending + uint64(l.AckPending)
		return l
	}
	r := &health.Report{
		Stream: "ORDERS", Time: at, LastSeq: 1200, Messages: 1200, Subjects: 40, MaxConsumers: 1000, Consumers: 5, Requests: 5,
		Layouts: []health.Layout{{Source: "msgs.received_from.*", Destination: "msgs.received_from.n4.{{partition(4,1)}}.{{wildcard(1)}}",
			Partitions: 4, Origin: "stream", Current: true}},
		Lanes: []health.Lane{
			lane(0, func(l *health.Lane) {
				l.DeliveredSeq, l.AckFloorSeq, l.DeliveredConsumer, l.AckFloorConsumer = 1198, 1198, 300, 300
				l.LastDelivery, l.LastAck, l.Waiting = at.Add(-2*time.Second), at.Add(-2*time.Second), 1
				l.PinnedTTL, l.PinnedClient, l.PinnedSince = 2*time.Minute, "Xk2lP9aQwe", at.Add(-5*time.Minute)
			}),
			lane(1, func(l *health.Lane) {
				l.Pending, l.AckPending, l.DeliveredSeq, l.AckFloorSeq, l.DeliveredConsumer, l.AckFloorConsumer = 120, 1, 1100, 1090, 280, 279
				l.LastDelivery, l.LastAck = at.Add(-1500*time.Millisecond), at.Add(-1600*time.Millisecond)
				l.Head = &health.Head{Seq: 1100, Subject: "msgs.received_from.n4.1.alice", Key: "alice", Time: at.Add(-95 * time.Second)}
				l.HeadDeliveries = 1
			}),
			lane(2, func(l *health.Lane) {
				l.Pending, l.AckPending, l.Redelivered, l.DeliveredSeq, l.AckFloorSeq, l.DeliveredConsumer, l.AckFloorConsumer = 30, 1, 1, 900, 850, 214, 210
				l.LastDelivery, l.LastAck = at.Add(-3*time.Minute), at.Add(-40*time.Minute)
				l.Head = &health.Head{Seq: 851, Subject: "msgs.received_from.n4.2.bob", Key: "bob", Time: at.Add(-41 * time.Minute)}
				l.HeadDeliveries = 4
			}),
			lane(3, func(l *health.Lane) {
				l.Pending, l.Paused, l.PauseRemaining, l.Held = 7, true, time.Hour, "repartition"
				l.Head = &health.Head{Seq: 1000, Subject: "msgs.received_from.n4.3.carol", Key: "carol", Time: at.Add(-10 * time.Minute)}
			}),
			{Name: "orders-n4-04", Design: "orders", Partition: -1, State: health.StateMissing},
		},
		Workers: []health.Workers{{Design: "orders",
			Live:   []membership.Member{{Instance: "one", Host: "h1", PID: 41, Started: at.Add(-time.Hour), DeadLetter: "dlq.orders", Renewed: at.Add(-time.Second)}},
			Gone:   []membership.Member{{Instance: "two", Renewed: at.Add(-2 * time.Minute), Expired: true}},
			Parked: []health.Parked{{Subject: "dlq.orders", Stream: "DLQ", Count: 3}}}},
		Findings: []health.Finding{
			{Severity: health.Critical, Code: "instance_gone", Lane: "orders-n4-02", Message: "lane orders-n4-02 was served by lanes work instance two, which lost its lease 2m0s ago (it died or is cut off from NATS), and no live instance has taken it: 31 message(s) wait", Advice: "live instances of design orders (one) have not taken it: read their logs (a lane they refuse is logged) and check their connection"},
			{Severity: health.Critical, Code: "missing", Lane: "orders-n4-04", Message: "lane orders-n4-04 did not answer in time", Advice: "check the cluster"},
			{Severity: health.Warning, Code: "redelivered", Lane: "orders-n4-02", Message: "lane orders-n4-02: its head message (seq 851, key bob) was delivered 4 times", Advice: "read the workers' errors"},
			{Severity: health.Info, Code: "held", Lane: "orders-n4-03", Message: "lane orders-n4-03 is held (paused) for a repartition", Advice: "lanes apply resumes it"},
		},
	}
	// lanes 0 and 1 are served by instance one; lane 2's instance died
	r.Lanes[0].Server = &health.Server{Instance: "one", Since: at.Add(-12 * time.Minute)}
	r.Lanes[1].Server = &health.Server{Instance: "one", Since: at.Add(-90 * time.Second)}
	r.Lanes[2].Server = &health.Server{Instance: "two", Since: at.Add(-time.Hour), Gone: true, Expired: true, GoneAt: at.Add(-2 * time.Minute)}
	r.Summarize()
	return r
}

// keyParallelReport is a key-parallel design's report (keys in flight
// 8): a lane whose window one key holds, one running several keys with a
// message waiting, one whose instance recorded no window yet, and one
// served by nobody.
func keyParallelReport() *health.Report {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	base := health.Lane{Design: "orders", Partitions: 4, Tagged: true, KeysInFlight: 8, State: health.StateOK, MaxAckPending: 8,
		AckPolicy: "explicit", AckWait: 30 * time.Second, MaxDeliver: -1, Durable: true, At: at, PinnedTTL: 2 * time.Minute}
	lane := func(p int, edit func(*health.Lane)) health.Lane {
		l := base
		l.Partition = p
		l.Name = "orders-n4-0" + string(rune('0'+p))
		l.Filter = "msgs.received_from.n4." + string(rune('0'+p)) + ".*"
		edit(&l)
		l.Backlog = l.Pending + uint64(l.AckPending)
		return l
	}
	served := func(w *membership.Window) *health.Server {
		return &health.Server{Instance: "one", Since: at.Add(-10 * time.Minute), Window: w}
	}
	r := &health.Report{
		Stream: "ORDERS", Time: at, LastSeq: 900, Messages: 900, Subjects: 300, MaxConsumers: 1000, Consumers: 4, Requests: 4,
		Layouts: []health.Layout{{Source: "msgs.received_from.*", Destination: "msgs.received_from.n4.{{partition(4,1)}}.{{wildcard(1)}}",
			Partitions: 4, Origin: "stream", Current: true}},
		Lanes: []health.Lane{
			lane(0, func(l *health.Lane) {
				l.Pending, l.AckPending, l.Redelivered, l.DeliveredSeq, l.AckFloorSeq = 40, 8, 1, 500, 310
				l.LastDelivery, l.LastAck = at.Add(-3*time.Second), at.Add(-4*time.Minute)
				l.Server = served(&membership.Window{Size: 8, Held: 8, Running: []string{"bob"}, RunningCount: 1, Keys: 1, Holder: "bob",
					Oldest: &membership.Waiting{Key: "bob", Seq: 311, Since: at.Add(-4 * time.Minute)}, At: at.Add(-5 * time.Second)})
			}),
			lane(1, func(l *health.Lane) {
				l.Pending, l.AckPending, l.DeliveredSeq, l.AckFloorSeq = 12, 5, 620, 600
				l.LastDelivery, l.LastAck = at.Add(-time.Second), at.Add(-time.Second)
				l.Server = served(&membership.Window{Size: 8, Held: 5, Running: []string{"alice", "carol", "dave"}, RunningCount: 3, Keys: 3,
					Oldest: &membership.Waiting{Key: "carol", Seq: 603, Since: at.Add(-1500 * time.Millisecond)}, At: at.Add(-2 * time.Second)})
			}),
			lane(2, func(l *health.Lane) { l.Server = served(nil) }),
			lane(3, func(l *health.Lane) { l.Pending = 3 }),
		},
		Workers: []health.Workers{{Design: "orders", Live: []membership.Member{{Instance: "one", Started: at.Add(-time.Hour), Renewed: at.Add(-time.Second)}}}},
		Findings: []health.Finding{
			{Severity: health.Warning, Code: "key_holds_window", Lane: "orders-n4-00", Message: "lane orders-n4-00: key bob holds the lane's whole window (8 of 8 messages out are its own)", Advice: "read lanes work's errors for key bob on one"},
		},
	}
	r.Summarize()
	return r
}

func TestInspectKeyParallelGolden(t *testing.T) {
	var b bytes.Buffer
	if err := InspectTable(&b, PlainStyles(), keyParallelReport()); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_keys_table", b.Bytes())
	for _, want := range []string{"WINDOW", "KEYS RUN", "OLDEST WAIT", "8/8 bob", "5/8", "-/8", "carol 1s", "bob 4m00s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	b.Reset()
	if err := InspectJSON(&b, keyParallelReport(), nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_keys_json", b.Bytes())
	var doc struct {
		Lanes []struct {
			KeysInFlight int `json:"keys_in_flight"`
			Window       *struct {
				Size, Held, Keys, RunningCount int
				Running                        []string
				Holder                         string
				Oldest                         *struct {
					Key     string
					Seq     uint64
					Seconds float64
				} `json:"oldest_waiting"`
			} `json:"window"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	w := doc.Lanes[0].Window
	if doc.Lanes[0].KeysInFlight != 8 || w == nil || w.Held != 8 || w.Holder != "bob" || w.Oldest == nil || w.Oldest.Seconds != 240 || w.Oldest.Seq != 311 {
		t.Fatalf("lane 0 JSON: %+v %+v", doc.Lanes[0], w)
	}
	if doc.Lanes[2].Window != nil || doc.Lanes[2].KeysInFlight != 8 {
		t.Fatalf("lane 2 has no window: %+v", doc.Lanes[2])
	}
	b.Reset()
	if err := InspectPrometheus(&b, keyParallelReport()); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_keys_prometheus", b.Bytes())
	checkExposition(t, b.String())
	for _, want := range []string{
		`lanes_lane_keys_in_flight{stream="ORDERS",design="orders",lane="orders-n4-03",partition="3"} 8`,
		`lanes_lane_window_held{stream="ORDERS",design="orders",lane="orders-n4-00",partition="0"} 8`,
		`lanes_lane_keys_running{stream="ORDERS",design="orders",lane="orders-n4-01",partition="1"} 3`,
		`lanes_lane_oldest_waiting_seconds{stream="ORDERS",design="orders",lane="orders-n4-00",partition="0"} 240`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("prometheus lacks %s", want)
		}
	}
	if strings.Contains(b.String(), `lanes_lane_window_held{stream="ORDERS",design="orders",lane="orders-n4-02"`) {
		t.Error("a lane without a window record has a window series")
	}
}

// TestInspectNoLanes: with no lanes, the report says what inspect looked
// for and claims no health (issue 12).
func TestInspectNoLanes(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &health.Report{Stream: "PLAIN", Time: at, LastSeq: 3, Messages: 3, Consumers: 1}
	r.Summarize()
	var b bytes.Buffer
	if err := InspectTable(&b, PlainStyles(), r); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_nolanes", b.Bytes())
	if strings.Contains(b.String(), "healthy") {
		t.Fatalf("no lanes, yet a health claim:\n%s", b.String())
	}
}

func TestInspectTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := InspectTable(&b, PlainStyles(), fixedReport()); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_table", b.Bytes())
}

func TestInspectTableWatchGolden(t *testing.T) {
	r := fixedReport()
	r.Interval = 2 * time.Second
	r.Lanes[0].DeliveredRate, r.Lanes[0].AckedRate = 12.5, 12.5
	r.Lanes[1].DeliveredRate, r.Lanes[1].AckedRate = 0.5, 0.5
	var b bytes.Buffer
	WatchHeader(&b, PlainStyles(), r.Time, 2*time.Second, "")
	if err := InspectTable(&b, PlainStyles(), r); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_watch", b.Bytes())
}

func TestInspectPrometheusGolden(t *testing.T) {
	var b bytes.Buffer
	if err := InspectPrometheus(&b, fixedReport()); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_prometheus", b.Bytes())
	checkExposition(t, b.String())
}

// checkExposition checks the text format rules a scraper relies on: every
// series follows its HELP and TYPE, and no series appears twice.
func checkExposition(t *testing.T, text string) {
	t.Helper()
	seen := map[string]bool{}
	typed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			typed[strings.Fields(line)[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		if !typed[name] {
			t.Fatalf("series before its TYPE line: %s", line)
		}
		series := line[:strings.LastIndexByte(line, ' ')]
		if seen[series] {
			t.Fatalf("duplicate series %s", series)
		}
		seen[series] = true
	}
}

func TestInspectJSONGolden(t *testing.T) {
	var b bytes.Buffer
	if err := InspectJSON(&b, fixedReport(), nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "inspect_json", b.Bytes())
	// The names scripts rely on.
	var doc struct {
		Lanes    []map[string]any `json:"lanes"`
		Findings []map[string]any `json:"findings"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "partition", "pending", "ack_pending", "max_ack_pending", "redelivered", "waiting"} {
		if _, ok := doc.Lanes[1][k]; !ok {
			t.Errorf("lane JSON lacks %q", k)
		}
	}
	for _, k := range []string{"severity", "lane", "message"} {
		if _, ok := doc.Findings[0][k]; !ok {
			t.Errorf("finding JSON lacks %q", k)
		}
	}
}

func TestPromEscape(t *testing.T) {
	if got := promEscape("a\"b\\c\nd"); got != `a\"b\\c\nd` {
		t.Fatal(got)
	}
}

// TestFindingsBounded: the table shows five findings of one code and
// counts the rest.
func TestFindingsBounded(t *testing.T) {
	var fs []health.Finding
	for i := 0; i < 7; i++ {
		fs = append(fs, health.Finding{Severity: health.Warning, Code: "no_workers", Message: "m", Advice: "a"})
	}
	fs = append(fs, health.Finding{Severity: health.Info, Code: "held", Message: "h", Advice: "a"})
	var b bytes.Buffer
	findings(&b, PlainStyles(), &health.Report{Findings: fs})
	out := b.String()
	if strings.Count(out, "no_workers: m") != 5 || !strings.Contains(out, "... and 2 more no_workers findings") || !strings.Contains(out, "held: h") {
		t.Fatalf("bounded findings:\n%s", out)
	}
}
