package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// lanesRun runs lanes in-process as a user types it.
func lanesRun(args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = commands.Main(append([]string{"lanes"}, args...), strings.NewReader(""), &out, &errw)
	return code, out.String(), errw.String()
}

func ptr[T any](v T) *T { return &v }

// laneDoc is the part of the JSON document scripts rely on.
type laneDoc struct {
	Name               string `json:"name"`
	Partition          int    `json:"partition"`
	Pending            uint64 `json:"pending"`
	AckPending         int    `json:"ack_pending"`
	MaxAckPending      int    `json:"max_ack_pending"`
	Redelivered        int    `json:"redelivered"`
	Waiting            int    `json:"waiting"`
	DeliveredStreamSeq uint64 `json:"delivered_stream_seq"`
	AckFloorStreamSeq  uint64 `json:"ack_floor_stream_seq"`
	Paused             bool   `json:"paused"`
	Backlog            uint64 `json:"backlog"`
}

type findingDoc struct {
	Severity string `json:"severity"`
	Code     string `json:"code"`
	Lane     string `json:"lane"`
	Message  string `json:"message"`
}

type inspectDoc struct {
	Lanes    []laneDoc    `json:"lanes"`
	Findings []findingDoc `json:"findings"`
	Key      []struct {
		Lanes []string `json:"lanes"`
	} `json:"key"`
}

func decode(t *testing.T, s string) inspectDoc {
	t.Helper()
	var d inspectDoc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return d
}

// TestInspectJSONEqualsConsumerInfo: for lanes with pending, in-flight,
// redelivered and paused messages, the JSON figures are the server's own.
func TestInspectJSONEqualsConsumerInfo(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "jsonfig", 4)
	natstest.CreateLanes(t, js, p, func(c *jetstream.ConsumerConfig) {
		switch c.Durable {
		case p.Lanes[2].Name:
			c.AckWait = 300 * time.Millisecond
		case p.Lanes[3].Name:
			c.PauseUntil = ptr(time.Now().Add(time.Hour))
		}
	})
	for part := 0; part < 4; part++ {
		natstest.Publish(t, js, natstest.SubjectsFor(t, p, part, 4)...)
	}
	natstest.Fetch(t, js, p.Stream.Name, p.Lanes[1].Name, 1, true)
	natstest.Fetch(t, js, p.Stream.Name, p.Lanes[1].Name, 1, false)
	natstest.Fetch(t, js, p.Stream.Name, p.Lanes[2].Name, 1, false)
	time.Sleep(450 * time.Millisecond)
	natstest.Fetch(t, js, p.Stream.Name, p.Lanes[2].Name, 1, false)
	for lane, pending := range []uint64{4, 2, 3, 4} {
		natstest.WaitPending(t, js, p.Stream.Name, p.Lanes[lane].Name, pending)
	}

	code, out, errOut := lanesRun("inspect", "--server", srv.URL(), "--stream", p.Stream.Name, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	doc := decode(t, out)
	if len(doc.Lanes) != 4 {
		t.Fatalf("want 4 lanes, got %d", len(doc.Lanes))
	}
	for _, l := range doc.Lanes {
		c, err := js.Consumer(context.Background(), p.Stream.Name, l.Name)
		if err != nil {
			t.Fatal(err)
		}
		ci := c.CachedInfo()
		want := laneDoc{Name: ci.Name, Partition: l.Partition, Pending: ci.NumPending, AckPending: ci.NumAckPending,
			MaxAckPending: ci.Config.MaxAckPending, Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting,
			DeliveredStreamSeq: ci.Delivered.Stream, AckFloorStreamSeq: ci.AckFloor.Stream, Paused: ci.Paused,
			Backlog: ci.NumPending + uint64(ci.NumAckPending)}
		if l != want {
			t.Errorf("%s:\n json   %+v\n server %+v", l.Name, l, want)
		}
	}
	// The scenario really has each kind of figure.
	if l := doc.Lanes[2]; l.Redelivered != 1 || l.AckPending != 1 {
		t.Errorf("lane 2 should have a redelivered message in flight: %+v", l)
	}
	if l := doc.Lanes[1]; l.AckPending != 1 || l.Pending != 2 {
		t.Errorf("lane 1 should have one in flight and two pending: %+v", l)
	}
	if !doc.Lanes[3].Paused || doc.Lanes[0].Pending != 4 {
		t.Errorf("lane 3 paused, lane 0 pending: %+v %+v", doc.Lanes[3], doc.Lanes[0])
	}
}

// TestInspectOutputs: the table for people, Prometheus for collectors, and
// a healthy stream says so.
func TestInspectOutputs(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "outputs", 4)
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 3)...)
	natstest.WaitPending(t, js, p.Stream.Name, p.Lanes[1].Name, 3)

	code, out, errOut := lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"outputs-n4-01", "BACKLOG", "No findings", "total 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "-o", "prometheus")
	if code != 0 || !strings.Contains(out, `lanes_lane_pending{stream="OUTPUTS",design="outputs",lane="outputs-n4-01",partition="1"} 3`) ||
		!strings.Contains(out, "# TYPE lanes_lane_backlog gauge") {
		t.Fatalf("prometheus output (exit %d):\n%s", code, out)
	}
	// A design file names the stream and design.
	dir := t.TempDir()
	file := filepath.Join(dir, "lanes.yaml")
	os.WriteFile(file, []byte("name: outputs\nsubject: outputs.received_from.*\npartitions: 4\n"), 0o644)
	code, out, errOut = lanesRun("inspect", "-s", srv.URL(), "-f", file, "-o", "json")
	if code != 0 || len(decode(t, out).Lanes) != 4 {
		t.Fatalf("-f: exit %d %s", code, errOut)
	}
}

// TestInspectFailOn: thresholds set exit 6, bad expressions exit 2.
func TestInspectFailOn(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "failon", 4, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(200 * time.Millisecond) })
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 2, 5)...)
	natstest.Fetch(t, js, p.Stream.Name, p.Lanes[2].Name, 1, false)
	time.Sleep(400 * time.Millisecond) // the head is now out longer than ack wait: stuck

	base := []string{"inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "-o", "json"}
	cases := []struct {
		exprs []string
		code  int
		say   string
	}{
		{[]string{"backlog>3"}, commands.ExitThreshold, "lane failon-n4-02 has backlog 5"},
		{[]string{"backlog>100"}, 0, ""},
		{[]string{"severity>=critical"}, commands.ExitThreshold, "critical finding"},
		{[]string{"ack_age>100ms"}, commands.ExitThreshold, "failon-n4-02"},
		{[]string{"ack_age>1h", "total_backlog>=5"}, commands.ExitThreshold, "total_backlog is 5"},
		{[]string{"redelivered>0", "pending == 0"}, commands.ExitThreshold, "--fail-on pending == 0: lane"},
		{[]string{"bogus>1"}, commands.ExitUsage, "unknown metric"},
		{[]string{"lag>soon"}, commands.ExitUsage, "needs a duration"},
		{[]string{"backlog"}, commands.ExitUsage, "METRIC OP VALUE"},
		{[]string{"severity>=fatal"}, commands.ExitUsage, "unknown severity"},
	}
	for _, tc := range cases {
		args := append([]string{}, base...)
		for _, e := range tc.exprs {
			args = append(args, "--fail-on", e)
		}
		code, out, errOut := lanesRun(args...)
		if code != tc.code || !strings.Contains(errOut, tc.say) {
			t.Errorf("%v: exit %d, want %d; stderr %q", tc.exprs, code, tc.code, errOut)
		}
		if tc.code == commands.ExitThreshold && len(decode(t, out).Lanes) != 4 {
			t.Errorf("%v: the report is still printed when a threshold is crossed", tc.exprs)
		}
	}
}

// TestInspectKey: which lane holds a key, and that lane's state.
func TestInspectKey(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "keyed", 8)
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, "keyed.received_from.alice", "keyed.received_from.alice")
	lane, _ := p.LaneOf("keyed.received_from.alice")
	natstest.WaitPending(t, js, p.Stream.Name, lane.Name, 2)

	code, out, errOut := lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "--key", "keyed.received_from.alice", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	doc := decode(t, out)
	if len(doc.Lanes) != 1 || doc.Lanes[0].Name != lane.Name || doc.Lanes[0].Pending != 2 {
		t.Fatalf("--key should report only lane %s with its 2 messages: %+v", lane.Name, doc.Lanes)
	}
	if len(doc.Key) != 1 || len(doc.Key[0].Lanes) != 1 || doc.Key[0].Lanes[0] != lane.Name {
		t.Fatalf("key answer: %+v", doc.Key)
	}
	code, out, _ = lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "--key", "keyed.received_from.alice")
	if code != 0 || !strings.Contains(out, "(key alice) is in partition") || !strings.Contains(out, lane.Name) {
		t.Fatalf("table answer (exit %d):\n%s", code, out)
	}
	// A bare key, as plan --key takes it.
	code, out, errOut = lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "--key", "alice", "-o", "json")
	if doc := decode(t, out); code != 0 || len(doc.Key) != 1 || len(doc.Key[0].Lanes) != 1 || doc.Key[0].Lanes[0] != lane.Name {
		t.Fatalf("--key alice: exit %d %s %+v", code, errOut, doc.Key)
	}
	code, _, errOut = lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "--key", "other.alice")
	if code != commands.ExitUsage || !strings.Contains(errOut, "does not match") {
		t.Fatalf("a key outside the mapping: exit %d %s", code, errOut)
	}
}

// TestInspectUsage: bad invocations exit 2 (or 1 for a missing stream)
// and print nothing on stdout.
func TestInspectUsage(t *testing.T) {
	srv := natstest.Start(t)
	cases := []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"inspect", "-s", srv.URL()}, commands.ExitUsage, "--stream is required"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "X", "-o", "yaml"}, commands.ExitUsage, "choose one of"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "X", "--design", "a", "-f", "lanes.yaml"}, commands.ExitUsage, "give one"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "X", "extra"}, commands.ExitUsage, "takes no arguments"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "X", "--watch=5ms"}, commands.ExitUsage, "too short"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "NOPE"}, commands.ExitError, "stream not found"},
		{[]string{"inspect", "-s", srv.URL(), "--stream", "X", "--watch", "1s", "-o", "prometheus"}, commands.ExitUsage, "--watch cannot write -o prometheus"},
	}
	for _, tc := range cases {
		code, out, errOut := lanesRun(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.say) || out != "" {
			t.Errorf("%v: exit %d (want %d), stderr %q, stdout %q", tc.args, code, tc.code, errOut, out)
		}
	}
}

// TestInspectWatchSurvivesRestart runs --watch against a server that is
// restarted: the watch says it is reconnecting, and reports continue after
// the server is back, with rates; cancelling ends it with exit 0.
func TestInspectWatchSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the server restarts under the watch)")
	}
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "watched", 2)
	natstest.CreateLanes(t, js, p)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 2)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.Buffer
	done := make(chan int)
	go func() {
		done <- commands.MainContext(ctx, []string{"lanes", "inspect", "-s", srv.URL(), "--stream", p.Stream.Name,
			"--timeout", "1s", "--watch", "200ms", "-o", "json"}, strings.NewReader(""), &out, &errOut)
	}()
	reports := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }
	testutil.WaitFor(t, "two reports before the restart", 10*time.Second, func() bool { return len(reports()) >= 2 })

	srv.Restart()
	restarted := time.Now()
	testutil.WaitFor(t, "a report after the restart", 30*time.Second, func() bool {
		lines := reports()
		var last struct {
			Time     time.Time `json:"time"`
			Interval float64   `json:"interval_seconds"`
			Lanes    []struct {
				Pending uint64   `json:"pending"`
				Rate    *float64 `json:"delivered_per_second"`
			} `json:"lanes"`
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
			t.Fatalf("watch line is not JSON: %v", err)
		}
		return last.Time.After(restarted) && len(last.Lanes) == 2 && last.Lanes[0].Pending == 2 && last.Lanes[0].Rate != nil
	})
	if s := errOut.String(); !strings.Contains(s, "reconnecting") && !strings.Contains(s, "cannot read") {
		t.Errorf("the watch should say it lost the server; stderr: %q", s)
	}
	t.Logf("stderr during the restart:\n%s", errOut.String())
	cancel()
	select {
	case code := <-done:
		if code != commands.ExitInterrupted {
			t.Fatalf("a cancelled watch ended with exit %d, want %d: %s", code, commands.ExitInterrupted, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop when cancelled")
	}
}

// TestInspectWatchTableAndFailOn: without a terminal, each refresh is
// appended; a crossed threshold ends the watch with exit 6.
func TestInspectWatchTableAndFailOn(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "tabled", 2)
	natstest.CreateLanes(t, js, p)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.Buffer
	done := make(chan int)
	go func() {
		done <- commands.MainContext(ctx, []string{"lanes", "inspect", "-s", srv.URL(), "--stream", p.Stream.Name,
			"--watch=150ms", "--fail-on", "total_backlog>0"}, strings.NewReader(""), &out, &errOut)
	}()
	testutil.WaitFor(t, "two table refreshes", 10*time.Second, func() bool { return strings.Count(out.String(), "Stream TABLED") >= 2 })
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 1)...)
	select {
	case code := <-done:
		if code != commands.ExitThreshold || !strings.Contains(errOut.String(), "total_backlog is 1") {
			t.Fatalf("exit %d, stderr %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop at the threshold")
	}
	if !strings.Contains(out.String(), "DELIV/S") {
		t.Errorf("refreshes after the first show rates:\n%s", out.String())
	}
}

// TestInspectClusterNodeHangs: a node that stops answering without
// leaving the cluster (a hung machine, a partition) leads some lanes. The
// server's CONSUMER.LIST then waits 4 s for them; inspect --timeout T still
// answers within about T, with the lanes that answered and the others
// named missing, instead of failing with exit 14 or taking twice T.
func TestInspectClusterNodeHangs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.StartRelayedCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	p := testutil.Plan(t, "hangs", 12, func(d *planner.Design) {
		d.Stream.Replicas = 3
		d.Lane.Replicas = 1
	})
	natstest.CreateLanes(t, js, p)
	for i := range p.Lanes {
		natstest.Publish(t, js, natstest.SubjectsFor(t, p, i, 2)...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	streamLeader := st.CachedInfo().Cluster.Leader
	led := map[string][]string{}
	for _, l := range p.Lanes {
		cons, err := js.Consumer(ctx, p.Stream.Name, l.Name)
		if err != nil {
			t.Fatal(err)
		}
		led[cons.CachedInfo().Cluster.Leader] = append(led[cons.CachedInfo().Cluster.Leader], l.Name)
	}
	victim, entry := -1, ""
	for i, s := range c.Servers {
		name := s.Opts.ServerName
		switch {
		case name != streamLeader && !s.JetStreamIsLeader() && len(led[name]) > 0 && victim < 0:
			victim = i
		case entry == "" && (name == streamLeader || s.JetStreamIsLeader()):
			entry = s.ClientURL()
		}
	}
	if victim < 0 || entry == "" {
		t.Skipf("no node leads lanes without leading the stream or the cluster (stream leader %s, lanes %v)", streamLeader, led)
	}
	gone := led[c.Servers[victim].Opts.ServerName]
	t.Logf("hanging %s, which leads %v", c.Servers[victim].Opts.ServerName, gone)
	c.Hang(victim)
	for _, timeout := range []time.Duration{2 * time.Second, 5 * time.Second} {
		start := time.Now()
		code, out, errs := lanesRun("inspect", "-s", entry, "--stream", p.Stream.Name, "--timeout", timeout.String(), "-o", "json")
		took := time.Since(start)
		t.Logf("--timeout %s: exit %d in %s; stderr %s", timeout, code, took, errs)
		if code != 0 {
			t.Fatalf("--timeout %s: exit %d: %s", timeout, code, errs)
		}
		if took > timeout+time.Second {
			t.Errorf("--timeout %s took %s", timeout, took)
		}
		var doc struct {
			Lanes []struct{ Name, State string }
		}
		json.Unmarshal([]byte(out), &doc)
		states := map[string]string{}
		for _, l := range doc.Lanes {
			states[l.Name] = l.State
		}
		for _, l := range p.Lanes {
			want := "ok"
			if slices.Contains(gone, l.Name) {
				want = "missing"
			}
			if states[l.Name] != want {
				t.Errorf("--timeout %s: lane %s is %q, want %s (%v)", timeout, l.Name, states[l.Name], want, states)
			}
		}
	}
}

// TestInspectWatchQuorumLost: with 2 of 3 nodes gone silent, inspect
// --watch keeps watching, and says what is wrong in words (the cluster has
// no leader), not as "API error code=503".
func TestInspectWatchQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.StartRelayedCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	p := testutil.Plan(t, "quorum", 2, func(d *planner.Design) { d.Stream.Replicas = 3 })
	natstest.CreateLanes(t, js, p)
	survivor := -1
	for i, s := range c.Servers {
		if !s.JetStreamIsLeader() {
			survivor = i
		}
	}
	for i := range c.Servers {
		if i != survivor {
			c.Hang(i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testutil.Buffer
	done := make(chan int, 1)
	go func() {
		done <- commands.MainContext(ctx, []string{"lanes", "inspect", "-s", c.Servers[survivor].ClientURL(), "--stream", p.Stream.Name,
			"--timeout", "1s", "--watch", "300ms", "-o", "json"}, strings.NewReader(""), &out, &errOut)
	}()
	// The survivor notices it has no leader within the server's lost-quorum
	// interval (10 s); until then requests go unanswered.
	deadline := time.Now().Add(40 * time.Second)
	for !strings.Contains(errOut.String(), "no leader") {
		select {
		case code := <-done:
			t.Fatalf("the watch ended with exit %d: %s", code, errOut.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch never said the cluster has no leader: %s", errOut.String())
		}
	}
	cancel()
	code := <-done
	msg := errOut.String()
	t.Logf("stderr:\n%s", msg)
	if code != commands.ExitInterrupted {
		t.Errorf("exit %d, want %d", code, commands.ExitInterrupted)
	}
	if strings.Contains(msg, "code=503") || strings.Contains(msg, "API error") {
		t.Errorf("the problem should be said in words, not as an API error: %q", msg)
	}
}

// TestInspectBadValues: empty values, a bad interval and an invalid stream
// name are usage errors (exit 2) that say what is wrong.
func TestInspectBadValues(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{[]string{"--stream", "X", "--watch", "0s"}, "--watch"},
		{[]string{"--stream", "X", "--watch", "0s"}, "interval 0s is too short"},
		{[]string{"--stream", "X", "--watch", "-5s"}, "too short"},
		{[]string{"--stream", "X", "--watch", "soon"}, "takes no arguments"},
		{[]string{"--stream", "X", "--key", ""}, "--key is empty"},
		{[]string{"--stream", ""}, "--stream is empty"},
		{[]string{"--stream", "X", "--design", ""}, "--design is empty"},
		{[]string{"--stream", "A.B"}, `--stream "A.B": not a valid stream name`},
		{[]string{"--stream", "A B"}, "not a valid stream name"},
		{[]string{"--stream", "X", "--timeout", "0s"}, "--timeout 0s: must be a positive duration"},
		{[]string{"--stream", "X", "--fail-on", ""}, "--fail-on"},
	} {
		code, out, errs := lanesRun(append([]string{"inspect", "-s", srv.URL()}, tc.args...)...)
		if code != commands.ExitUsage || !strings.Contains(errs, tc.say) || out != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, errs, tc.say)
		}
	}
}

// TestInspectTerminalSafety: names and subjects from the server are shown
// escaped in the table: a consumer named with an escape sequence cannot
// drive the terminal.
func TestInspectTerminalSafety(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "safe", 2)
	natstest.CreateLanes(t, js, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	evil := "audit\x1b[2J\x1b]0;x\x07"
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: evil, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Skipf("the server refuses the name: %v", err)
	}
	code, out, errs := lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name)
	if code != 0 || strings.ContainsAny(out+errs, "\x1b\x07") || !strings.Contains(out, `audit\x1b[2J`) {
		t.Fatalf("exit %d; the name must appear escaped:\n%q", code, out)
	}
}

// servingDoc is the part of inspect's JSON about lanes work.
type servingDoc struct {
	Lanes []struct {
		Name         string     `json:"name"`
		ServedBy     string     `json:"served_by"`
		ServedSince  *time.Time `json:"served_since"`
		ServedByGone bool       `json:"served_by_gone"`
		Running      *struct {
			Seq     uint64  `json:"seq"`
			Seconds float64 `json:"seconds"`
		} `json:"running"`
	} `json:"lanes"`
	Workers []struct {
		Design string `json:"design"`
		Live   []struct {
			Instance   string `json:"instance"`
			DeadLetter string `json:"dead_letter"`
		} `json:"live"`
		Gone []struct {
			Instance     string `json:"instance"`
			LeaseExpired bool   `json:"lease_expired"`
		} `json:"gone"`
		Parked []struct {
			Subject string `json:"subject"`
			Stream  string `json:"stream"`
			Count   uint64 `json:"count"`
		} `json:"parked"`
	} `json:"workers"`
	WorkersUnknown string       `json:"workers_unknown"`
	Findings       []findingDoc `json:"findings"`
}

func (d servingDoc) codes() map[string]int {
	out := map[string]int{}
	for _, f := range d.Findings {
		out[f.Code]++
	}
	return out
}

// TestInspectServing: inspect names the lanes work instance serving each
// lane and since when, counts what the workers parked, and once the
// instance is killed (SIGKILL: no hand-over, its lease just stops being
// renewed) reports each lane's instance gone within the lease.
func TestInspectServing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (an instance killed -9, its lease let expire)")
	}
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "2")
	_, js := natstest.Connect(t, url)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}}); err != nil {
		t.Fatal(err)
	}
	read := func() (servingDoc, string) {
		code, out, errs := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name, "-o", "json")
		var d servingDoc
		if code != 0 && code != commands.ExitThreshold {
			t.Fatalf("inspect: exit %d\n%s", code, errs)
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return d, out
	}
	// Before any worker: no bucket, nothing said about workers.
	if d, _ := read(); d.WorkersUnknown != "" || d.codes()["instance_gone"] != 0 || len(d.Lanes) != 2 || d.Lanes[0].ServedBy != "" {
		t.Fatalf("before any worker: %+v", d)
	}

	started := time.Now()
	// Every message is terminated by its handler (exit 65), so parked at once.
	cmd, stderr := startLanes(t, workArgs("-s", url, "--instance", "one", "--lease", "2s", "--exec", "exit 65",
		"--on-poison", "park", "--dead-letter", "dlq.orders")...)
	natstest.Publish(t, js, append(natstest.SubjectsFor(t, p, 0, 2), natstest.SubjectsFor(t, p, 1, 1)...)...)
	var d servingDoc
	testutil.WaitFor(t, "both lanes served by one, 3 messages parked", 20*time.Second, func() bool {
		d, _ = read()
		if len(d.Workers) != 1 || len(d.Workers[0].Parked) != 1 || d.Workers[0].Parked[0].Count != 3 {
			return false
		}
		for _, l := range d.Lanes {
			if l.ServedBy != "one" || l.ServedByGone || l.ServedSince == nil {
				return false
			}
		}
		return true
	})
	for _, l := range d.Lanes {
		if l.ServedSince.Before(started.Add(-time.Second)) || l.ServedSince.After(time.Now()) {
			t.Errorf("lane %s served since %s, the worker started at %s", l.Name, l.ServedSince, started)
		}
	}
	if w := d.Workers[0]; len(w.Live) != 1 || w.Live[0].Instance != "one" || w.Live[0].DeadLetter != "dlq.orders" || w.Parked[0].Stream != "DLQ" {
		t.Errorf("workers: %+v", w)
	}
	if c := d.codes(); c["parked"] != 1 || c["instance_gone"] != 0 {
		t.Errorf("findings: %+v", d.Findings)
	}
	code, table, _ := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name)
	if code != 0 || !strings.Contains(table, "SERVED BY") || !strings.Contains(table, "one (") ||
		!strings.Contains(table, "workers   orders: 1 live (one)") || !strings.Contains(table, "parked    orders: 3 on dlq.orders (stream DLQ)") {
		t.Errorf("table (exit %d):\n%s", code, table)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cmd.Wait()
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 1)...) // a message now waits on lane 1
	// The instance's record expires at the server, which writes a marker
	// in its place; a read in between sees neither (the lanes' instance is
	// gone, but not yet listed among the gone), so the wait is for both.
	testutil.WaitFor(t, "both lanes' instance gone, and the instance listed gone", 15*time.Second, func() bool {
		d, _ = read()
		for _, l := range d.Lanes {
			if !l.ServedByGone {
				return false
			}
		}
		return d.codes()["instance_gone"] == 2 && len(d.Workers) == 1 && len(d.Workers[0].Gone) == 1
	})
	took := time.Since(killed)
	t.Logf("instance gone reported %s after SIGKILL (lease 2s)", took.Round(10*time.Millisecond))
	if took > 2*time.Second+3*time.Second {
		t.Errorf("instance gone after %s: the documented bound is the lease and a second or two", took)
	}
	for _, f := range d.Findings {
		if f.Code == "no_workers" || f.Code == "instance_gone" && f.Lane == p.Lanes[1].Name && f.Severity != "critical" {
			t.Errorf("finding %+v: one finding per fact, critical when messages wait", f)
		}
	}
	if g := d.Workers[0].Gone; len(g) != 1 || g[0].Instance != "one" || !g[0].LeaseExpired {
		t.Errorf("gone: %+v", g)
	}
	_ = stderr
}

// TestInspectWorkersUnknown: a user who may read the lanes but not the
// membership bucket gets the whole report, fast, with one finding saying
// who serves the lanes is unknown.
func TestInspectWorkersUnknown(t *testing.T) {
	cleanEnv(t)
	reader := natstest.ReadOnlyJetStream
	reader.Name, reader.Password = "reader", "reader-pw"
	srv := natstest.Start(t, natstest.WithUsers(reader, natstest.User{Name: "admin", Password: "admin-pw"}))
	_, js := natstest.Connect(t, srv.URL(), nats.UserInfo("admin", "admin-pw"))
	p := testutil.Plan(t, "unknown", 4)
	natstest.CreateLanes(t, js, p)
	if _, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: membership.Bucket, LimitMarkerTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out, errs := lanesRun("inspect", "-s", srv.URL(), "--user", "reader", "--password", "reader-pw", "--stream", p.Stream.Name, "-o", "json")
	took := time.Since(start)
	var d servingDoc
	if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	if len(d.Lanes) != 4 || d.WorkersUnknown == "" || d.codes()["workers_unknown"] != 1 || len(d.Findings) != 1 {
		t.Fatalf("want the 4 lanes and one workers_unknown finding: %s", out)
	}
	if !strings.Contains(d.WorkersUnknown, "permission") || strings.Contains(out+errs, "reader-pw") {
		t.Errorf("workers_unknown should say why, without secrets: %q", d.WorkersUnknown)
	}
	if took > 3*time.Second {
		t.Errorf("a forbidden bucket took %s: the guard should end it at once", took)
	}
}

// TestInspectSlowMembershipBucket: the lanes work membership bucket's
// leader stops answering (a hung node) while the lanes' own node answers:
// inspect still reports every lane within about its --timeout, with the
// workers unknown (one info finding), instead of failing or waiting.
func TestInspectSlowMembershipBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cleanEnv(t)
	c := natstest.StartRelayedCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	p := testutil.Plan(t, "slowbucket", 4)
	natstest.CreateLanes(t, js, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	home := st.CachedInfo().Cluster.Leader // R1: the stream and its lanes live there
	victim, entry := -1, ""
	for i, s := range c.Servers {
		switch name := s.Opts.ServerName; {
		case name == home:
			entry = s.ClientURL()
		case victim < 0 && !s.JetStreamIsLeader():
			victim = i
		}
	}
	name := c.Servers[victim].Opts.ServerName
	if err := natstest.RetryPlacement(ctx, func() error {
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: membership.Bucket, LimitMarkerTTL: time.Hour,
			Placement: &jetstream.Placement{Tags: []string{"node:" + name}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.Hang(victim)
	const timeout = 2 * time.Second
	start := time.Now()
	code, out, errs := lanesRun("inspect", "-s", entry, "--stream", p.Stream.Name, "--timeout", timeout.String(), "-o", "json")
	took := time.Since(start)
	var d servingDoc
	if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, out, errs)
	}
	if len(d.Lanes) != 4 || d.WorkersUnknown == "" || d.codes()["workers_unknown"] != 1 {
		t.Errorf("want the 4 lanes and workers_unknown (the bucket on hung %s): %s", name, out)
	}
	if took > timeout+time.Second {
		t.Errorf("inspect --timeout %s took %s", timeout, took)
	}
	t.Logf("%s: workers unknown: %s", took, d.WorkersUnknown)
}

// TestInspectWords: words that match the facts (issue 12). A stream with
// no lanes claims no health; a push consumer on a partition is not a
// lane and gets no lane finding.
func TestInspectWords(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}}); err != nil {
		t.Fatal(err)
	}
	natstest.Publish(t, js, "plain.a", "plain.b")
	code, out, _ := lanesRun("inspect", "-s", srv.URL(), "--stream", "PLAIN")
	if code != 0 || !strings.Contains(out, "No lanes: no consumer of this stream carries lanes metadata") || strings.Contains(out, "healthy") {
		t.Fatalf("a stream with no lanes (exit %d):\n%s", code, out)
	}

	p := testutil.Plan(t, "pushed", 2, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(200 * time.Millisecond) })
	natstest.CreateLanes(t, js, p)
	if _, err := js.CreateOrUpdateConsumer(ctx, p.Stream.Name, jetstream.ConsumerConfig{Durable: "push", DeliverSubject: "nobody.listens",
		FilterSubject: p.Lanes[1].Filter, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
		t.Fatal(err)
	}
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 2)...)
	time.Sleep(400 * time.Millisecond) // older than the ack wait: no_workers on the lane itself
	code, out, _ = lanesRun("inspect", "-s", srv.URL(), "--stream", p.Stream.Name, "-o", "json")
	doc := decode(t, out)
	if code != 0 || len(doc.Lanes) != 2 {
		t.Fatalf("exit %d, lanes %+v", code, doc.Lanes)
	}
	for _, f := range doc.Findings {
		if f.Lane == "push" && f.Code != "overlap" || f.Lane == "push" && !strings.Contains(f.Message, "push consumer push") {
			t.Errorf("the push consumer got a lane finding: %+v", f)
		}
	}
}

// TestInspectTwoDesignsOnOneStream: two designs with the same partition
// count share the stream's transform, and each design's lanes get every
// message (two services that each want all updates in key order): not an
// overlap. A worker with its own durable on a lane's filter still is.
func TestInspectTwoDesignsOnOneStream(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	for _, name := range []string{"orders", "audit"} {
		if code, out, errs := lanes(t, append(applyArgs("-s", srv.URL()), "--name", name)...); code != 0 {
			t.Fatalf("apply %s: exit %d\n%s\n%s", name, code, out, errs)
		}
	}
	users := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	for _, u := range users {
		natstest.Publish(t, js, "msgs.received_from."+u)
	}
	inspect := []string{"inspect", "-s", srv.URL(), "--stream", "ORDERS", "-o", "json", "--fail-on", "severity>=critical"}
	var doc inspectDoc
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errs := lanesRun(inspect...)
		doc = decode(t, out)
		backlog := map[string]uint64{}
		for _, l := range doc.Lanes {
			backlog[strings.SplitN(l.Name, "-", 2)[0]] += l.Backlog
		}
		if code != 0 {
			t.Fatalf("two designs sharing a stream: exit %d\n%s\n%+v", code, errs, doc.Findings)
		}
		if len(doc.Lanes) == 16 && backlog["orders"] == uint64(len(users)) && backlog["audit"] == uint64(len(users)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("each design should hold every message: backlog %v, %d lanes", backlog, len(doc.Lanes))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, f := range doc.Findings {
		if f.Code == "overlap" || f.Code == "gap" || f.Severity == "critical" {
			t.Errorf("false finding for two designs sharing a stream: %+v", f)
		}
	}

	// Each worker with its own durable on one lane's filter: a real overlap.
	ctx := context.Background()
	c, err := js.Consumer(ctx, "ORDERS", "orders-n8-03")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"worker-1", "worker-2"} {
		if _, err := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: w, FilterSubject: c.CachedInfo().Config.FilterSubject,
			AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := lanesRun(inspect...)
	doc = decode(t, out)
	var dup []findingDoc
	for _, f := range doc.Findings {
		if f.Severity == "critical" {
			dup = append(dup, f)
		}
	}
	if code != 6 || len(dup) != 1 || dup[0].Code != "duplicate_durable" || !strings.Contains(dup[0].Message, "worker-1, worker-2 all filter") {
		t.Fatalf("a durable per worker: exit %d, critical findings %+v", code, dup)
	}
}

// TestInspectShowsAHungHandler: an --http handler that never answers keeps
// its lane alive with in-progress acks, which look like deliveries to the
// server; lanes work records the message once it has run far longer than
// the lane's usual time, and inspect reports it (long_running, the
// RUNNING column) instead of "the lanes look healthy".
func TestInspectShowsAHungHandler(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a message must run past SlowAfter (10s)")
	}
	cleanEnv(t)
	url := natstest.Start(t).URL()
	p := applyDesign(t, url, "--partitions", "2", "--ack-wait", "2s")
	_, js := natstest.Connect(t, url)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Lanes-Seq") == "2" {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(hang)
	startLanes(t, workArgs("-s", url, "--instance", "one", "--http", srv.URL)...)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 1, 2)...)
	var d servingDoc
	testutil.WaitFor(t, "inspect to report the hung handler", 40*time.Second, func() bool {
		code, out, _ := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name, "-o", "json")
		if code != 0 && code != commands.ExitThreshold || json.Unmarshal([]byte(out), &d) != nil {
			return false
		}
		return d.codes()["long_running"] == 1
	})
	for _, l := range d.Lanes {
		if (l.Running != nil) != (l.Name == p.Lanes[1].Name) || l.Running != nil && (l.Running.Seq != 2 || l.Running.Seconds < work.SlowAfter(0).Seconds()) {
			t.Errorf("lane %s running: %+v", l.Name, l.Running)
		}
	}
	code, table, _ := lanesRun("inspect", "-s", url, "--stream", p.Stream.Name, "--fail-on", "severity>=warning")
	if code != commands.ExitThreshold || !strings.Contains(table, "RUNNING") || !strings.Contains(table, " seq 2") || strings.Contains(table, "look healthy") {
		t.Errorf("table (exit %d, want %d):\n%s", code, commands.ExitThreshold, table)
	}
}
