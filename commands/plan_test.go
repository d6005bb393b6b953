package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

const seedFile = "../examples/seed/lanes.yaml"
const deviceFile = "../examples/device-events/lanes.yaml"
const deviceClusterFile = "../examples/device-events-cluster/lanes.yaml" // mapping: account

// TestPlanGolden covers every output format of plan.
func TestPlanGolden(t *testing.T) {
	cases := []struct {
		golden string
		args   []string
	}{
		{"plan/seed.table", []string{"plan", "-f", seedFile}},
		{"plan/seed-keys.table", []string{"plan", "-f", seedFile, "--keys", "../examples/seed/keys.txt"}},
		{"plan/seed-keys.json", []string{"plan", "-f", seedFile, "--keys", "../examples/seed/keys.txt", "-o", "json"}},
		{"plan/seed-keys.yaml", []string{"plan", "-f", seedFile, "--keys", "../examples/seed/keys.txt", "-o", "yaml"}},
		{"plan/seed.conf", []string{"plan", "-f", seedFile, "-o", "conf"}},
		{"plan/seed.nsc", []string{"plan", "-f", seedFile, "-o", "nsc"}},
		{"plan/seed-key-bob.table", []string{"plan", "-f", seedFile, "--key", "bob"}},
		{"plan/seed-key-bob.json", []string{"plan", "-f", seedFile, "--key", "msgs.received_from.bob", "-o", "json"}},
		{"plan/devices-keys.table", []string{"plan", "-f", deviceFile, "--keys", "../examples/device-events/keys.txt"}},
		{"plan/devices.conf", []string{"plan", "-f", deviceClusterFile, "-o", "conf"}},
		{"plan/devices.nsc", []string{"plan", "-f", deviceClusterFile, "-o", "nsc"}},
		{"plan/flags.json", []string{"plan", "--name", "pay", "--subject", "pay.*.*", "--key-tokens", "2", "--partitions", "3", "--ack-wait", "1m", "--pinned", "-o", "json"}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.golden, "/", "_"), func(t *testing.T) {
			stdout, stderr, code := run(t, "", tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden(t, tc.golden, stdout)
		})
	}
}

func TestPlanJSONFieldsForScripts(t *testing.T) {
	stdout, _, code := run(t, "alice\nbob\ncarol\nalice\n", "plan", "-f", seedFile, "--keys", "-", "-o", "json")
	if code != 0 {
		t.Fatal(code)
	}
	var doc struct {
		Mapping   struct{ Source, Destination string }
		Stream    map[string]any
		Consumers []struct {
			Durable       string            `json:"durable_name"`
			Filter        string            `json:"filter_subject"`
			AckPolicy     string            `json:"ack_policy"`
			AckWait       int64             `json:"ack_wait"`
			MaxAckPending int               `json:"max_ack_pending"`
			Metadata      map[string]string `json:"metadata"`
		}
		Lanes []struct {
			Name      string
			Partition int
			Filter    string
			Keys      int
			Messages  int
		}
		Assignments []struct {
			Subject, Key, Lane string
			Partition          int
		}
		Skew struct {
			Keys            int64 `json:"keys"`
			Messages        int64 `json:"messages"`
			MessagesPerLane struct {
				Max int64 `json:"max"`
			} `json:"messages_per_lane"`
			MaxToMean float64 `json:"max_to_mean"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, stdout)
	}
	if doc.Mapping.Source != "msgs.received_from.*" || doc.Stream["name"] != "ORDERS" || len(doc.Consumers) != 8 || len(doc.Lanes) != 8 {
		t.Fatalf("document: %+v", doc)
	}
	c := doc.Consumers[7]
	if c.Durable != "orders-n8-07" || c.AckPolicy != "explicit" || c.AckWait != int64(30*time.Second) || c.MaxAckPending != 1 || c.Metadata["lanes.partition"] != "7" {
		t.Fatalf("consumer: %+v", c)
	}
	if len(doc.Assignments) != 4 || doc.Assignments[3].Key != "alice" || doc.Assignments[3].Lane != "orders-n8-07" || doc.Lanes[7].Keys != 1 || doc.Lanes[7].Messages != 2 ||
		doc.Skew.Keys != 3 || doc.Skew.Messages != 4 || doc.Skew.MessagesPerLane.Max != 2 {
		t.Fatalf("assignments %+v lanes %+v skew %+v", doc.Assignments, doc.Lanes, doc.Skew)
	}
}

// Bad input: exit 2, one clear message on stderr, nothing on stdout.
func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keys := write("keys.txt", "alice\nbob\nmsgs.other.carol\n")
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"no subject", "", []string{"plan", "--name", "x"}, "subject"},
		{"partitions zero", "", []string{"plan", "-f", seedFile, "--partitions", "0"}, "--partitions: partitions \"0\": must be at least 1"},
		{"partitions huge", "", []string{"plan", "-f", seedFile, "--partitions", "99999999"}, "16384"},
		{"key token zero", "", []string{"plan", "-f", seedFile, "--key-tokens", "0"}, "--key-tokens: key_tokens \"0\""},
		{"key token beyond", "", []string{"plan", "-f", seedFile, "--key-tokens", "2"}, "only 1"},
		{"key token not a number", "", []string{"plan", "-f", seedFile, "--key-tokens", "one"}, "--key-tokens"},
		{"gt key", "", []string{"plan", "--name", "x", "--subject", "msgs.>"}, "'>'"},
		{"invalid subject", "", []string{"plan", "--name", "x", "--subject", "msgs..*"}, "not a valid NATS subject"},
		{"no star", "", []string{"plan", "--name", "x", "--subject", "msgs.all"}, "no '*'"},
		{"bad stream", "", []string{"plan", "-f", seedFile, "--stream", "A.B"}, "stream.name"},
		{"unknown field", "", []string{"plan", "-f", write("typo.yaml", "name: x\nsubject: a.*\npartitons: 3\n")}, "typo.yaml:3: unknown field \"partitons\""},
		{"malformed yaml", "", []string{"plan", "-f", write("bad.yaml", "name: [x\n")}, "bad.yaml"},
		{"missing file", "", []string{"plan", "-f", filepath.Join(dir, "nope.yaml")}, "cannot read design file"},
		{"zero ack wait", "", []string{"plan", "-f", seedFile, "--ack-wait", "0s"}, "--ack-wait: lane.ack_wait"},
		{"negative ack wait", "", []string{"plan", "-f", seedFile, "--ack-wait", "-5s"}, "positive"},
		{"file duration", "", []string{"plan", "-f", write("d.yaml", "name: x\nsubject: a.*\nlane:\n  ack_wait: -1s\n")}, "d.yaml:4: lane.ack_wait"},
		{"max ack pending zero", "", []string{"plan", "-f", seedFile, "--max-ack-pending", "0"}, "lane.max_ack_pending"},
		{"random mapping", "", []string{"plan", "-f", seedFile, "--destination", "msgs.{{random(8)}}.{{wildcard(1)}}"}, "not deterministic"},
		{"weighted mapping", "", []string{"plan", "-f", write("w.yaml", "name: x\nsubject: a.*\ndestination:\n  - a.1\n")}, "w.yaml:4"},
		{"keys line", "", []string{"plan", "-f", seedFile, "--keys", keys, "-o", "json"}, "keys.txt line 3: \"msgs.other.carol\" does not match"},
		{"stdin keys line", "alice\nfoo.bar\n", []string{"plan", "-f", seedFile, "--keys", "-", "-o", "yaml"}, "stdin line 2"},
		{"keys missing", "", []string{"plan", "-f", seedFile, "--keys", filepath.Join(dir, "none.txt")}, "--keys"},
		{"bad output", "", []string{"plan", "-f", seedFile, "-o", "xml"}, "--output \"xml\""},
		{"key and keys", "", []string{"plan", "-f", seedFile, "--key", "a", "--keys", keys}, "cannot be combined"},
		{"key mismatch", "", []string{"plan", "-f", seedFile, "--key", "a.b"}, "does not match"},
		{"unknown flag", "", []string{"plan", "--frobnicate"}, "frobnicate"},
		{"stray argument", "", []string{"plan", "-f", seedFile, "extra"}, "no arguments"},
		{"unknown command", "", []string{"plna"}, "unknown command \"plna\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			emit := filepath.Join(dir, tc.name, "defs")
			args := append(append([]string{}, tc.args...), "--emit-dir", emit)
			stdout, stderr, code := run(t, tc.stdin, args...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitUsage, stderr)
			}
			if stdout != "" {
				t.Fatalf("stdout must stay empty on error, got %q", stdout)
			}
			if !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Fatalf("stderr %q: want one line containing %q", stderr, tc.want)
			}
			if _, err := os.Stat(emit); err == nil {
				t.Fatal("--emit-dir was written although the input is bad")
			}
		})
	}
}

func TestPlanWarnings(t *testing.T) {
	stdout, stderr, code := run(t, "", "plan", "-f", seedFile, "--max-ack-pending", "3", "-o", "json")
	if code != 0 || !strings.Contains(stderr, "warning: lane.max_ack_pending is 3") || !json.Valid([]byte(stdout)) {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	_, stderr, code = run(t, "", "plan", "-f", deviceFile)
	if code != 0 || !strings.Contains(stderr, "ab+c and a+bc") {
		t.Fatalf("multi-token warning missing: %d %q", code, stderr)
	}
}

// A design at or above the measured steep point of the server's CPU per
// message is warned on stderr and in the plan's JSON; one lane fewer is not.
func TestPlanLaneCountWarning(t *testing.T) {
	steep := planner.MeasuredServerCPU.Steep()
	for _, tc := range []struct {
		partitions int
		warned     bool
	}{{steep - 1, false}, {steep, true}} {
		stdout, stderr, code := run(t, "", "plan", "-f", seedFile, "--partitions", strconv.Itoa(tc.partitions), "-o", "json")
		var doc struct {
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || code != 0 {
			t.Fatalf("%d lanes: exit %d, %v", tc.partitions, code, err)
		}
		want := fmt.Sprintf("partitions is %d: the server's CPU per message grows with the lane count", tc.partitions)
		inJSON := slices.ContainsFunc(doc.Warnings, func(w string) bool { return strings.HasPrefix(w, want) })
		if inJSON != tc.warned || strings.Contains(stderr, "warning: "+want) != tc.warned {
			t.Errorf("%d lanes: warned in JSON %v, on stderr %q; want %v", tc.partitions, doc.Warnings, stderr, tc.warned)
		}
	}
	_, stderr, code := run(t, "", "plan", "-f", seedFile, "--partitions", strconv.Itoa(steep))
	if code != 0 || !strings.Contains(stderr, "lane.keys_in_flight") || !strings.Contains(stderr, "lanes simulate --sweep") {
		t.Fatalf("table output: exit %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	SetVersion("1.2.3", "abc123", "2026-11-30")
	defer SetVersion("dev", "none", "unknown")
	stdout, _, code := run(t, "", "--version")
	if code != 0 || stdout != "lanes 1.2.3 (commit abc123, built 2026-11-30)\n" {
		t.Fatalf("%d %q", code, stdout)
	}
}

func TestHelpHasExamples(t *testing.T) {
	for _, cmd := range []string{"plan"} {
		stdout, _, code := run(t, "", cmd, "--help")
		if code != 0 || !strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "--partitions") {
			t.Fatalf("%s --help: %d\n%s", cmd, code, stdout)
		}
	}
}

// TestEmittedDefinitionsAcceptedByServer sends stream.json and every
// <lane>.json to a real server exactly as written, through the raw API that
// nats stream add --config and nats consumer add --config end up calling.
func TestEmittedDefinitionsAcceptedByServer(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := natstest.Connect(t, srv.URL())
	for _, design := range []string{seedFile, deviceFile} {
		dir := t.TempDir()
		_, stderr, code := run(t, "", "plan", "-f", design, "--replicas", "1", "--emit-dir", dir)
		if code != 0 {
			t.Fatalf("%s: %s", design, stderr)
		}
		streamDef, err := os.ReadFile(filepath.Join(dir, "stream.json"))
		if err != nil {
			t.Fatal(err)
		}
		var s struct{ Name string }
		json.Unmarshal(streamDef, &s)
		apiOK(t, nc, "$JS.API.STREAM.CREATE."+s.Name, streamDef)
		lanes, _ := filepath.Glob(filepath.Join(dir, "*-n*-*.json"))
		if len(lanes) < 8 {
			t.Fatalf("%s: %d lane files", design, len(lanes))
		}
		for _, f := range lanes {
			def, _ := os.ReadFile(f)
			name := strings.TrimSuffix(filepath.Base(f), ".json")
			apiOK(t, nc, "$JS.API.CONSUMER.CREATE."+s.Name+"."+name, []byte(`{"stream_name":"`+s.Name+`","config":`+string(def)+`}`))
		}
	}
}

func apiOK(t *testing.T, nc *nats.Conn, subject string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Error *struct{ Description string } `json:"error"`
	}
	json.Unmarshal(msg.Data, &resp)
	if resp.Error != nil {
		t.Fatalf("%s rejected: %s\n%s", subject, resp.Error.Description, body)
	}
}

// The YAML document says exactly what the JSON one does.
func TestPlanYAMLMatchesJSON(t *testing.T) {
	args := []string{"plan", "-f", deviceFile, "--keys", "../examples/device-events/keys.txt"}
	js, _, c1 := run(t, "", append(args, "-o", "json")...)
	ym, _, c2 := run(t, "", append(args, "-o", "yaml")...)
	if c1 != 0 || c2 != 0 {
		t.Fatal(c1, c2)
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ym), &fromYAML); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	b, err := json.Marshal(fromYAML)
	if err != nil {
		t.Fatal(err)
	}
	var roundTrip any
	json.Unmarshal(b, &roundTrip)
	if !reflect.DeepEqual(fromJSON, roundTrip) {
		t.Fatalf("YAML and JSON documents differ:\n%s\n%s", js, b)
	}
}

// TestPlanKeysFromPipe: plan --keys <(command) -o json reads the pipe once
// and assigns every key (a second read of a pipe finds nothing).
func TestPlanKeysFromPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.WriteString("alice\nbob\ncarol\n")
		w.Close()
	}()
	path := fmt.Sprintf("/dev/fd/%d", r.Fd())
	stdout, stderr, code := run(t, "", "plan", "-f", seedFile, "--keys", path, "-o", "json")
	var doc struct {
		Assignments []struct{ Key string }
		Lanes       []struct{ Keys int }
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, stderr)
	}
	keys := 0
	for _, l := range doc.Lanes {
		keys += l.Keys
	}
	if len(doc.Assignments) != 3 || keys != 3 {
		t.Fatalf("%d assignments, %d keys over the lanes; want 3 and 3", len(doc.Assignments), keys)
	}
}

// TestPlanKeysFromFIFO: a named FIFO is read like a file, for every output.
func TestPlanKeysFromFIFO(t *testing.T) {
	for _, format := range []string{"json", "table"} {
		fifo := filepath.Join(t.TempDir(), "keys")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skip(err)
		}
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			f.WriteString("alice\nbob 3\n")
			f.Close()
		}()
		done := make(chan struct{})
		var stdout, stderr string
		var code int
		go func() {
			defer close(done)
			stdout, stderr, code = run(t, "", "plan", "-f", seedFile, "--keys", fifo, "-o", format)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("-o %s: plan --keys FIFO hangs", format)
		}
		if code != 0 || !strings.Contains(stdout, "orders-n8-04") {
			t.Fatalf("-o %s: exit %d: %s\n%s", format, code, stderr, stdout)
		}
	}
}

// TestPlanEmptyValues: a flag given an empty value is an error, not ignored.
func TestPlanEmptyValues(t *testing.T) {
	for _, args := range [][]string{
		{"plan", "-f", seedFile, "--key", ""},
		{"plan", "-f", seedFile, "--keys", ""},
		{"plan", "-f", ""},
	} {
		stdout, stderr, code := run(t, "", args...)
		if code != ExitUsage || stdout != "" || !strings.Contains(stderr, "empty") {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// TestTerminalSafety: escape sequences in keys reach neither the table nor
// an error line raw.
func TestTerminalSafety(t *testing.T) {
	esc := "\x1b[2J\x1b]0;pwned\x07"
	stdout, stderr, code := run(t, "alice"+esc+"\nbob\n", "plan", "-f", seedFile, "--keys", "-")
	if code != 0 || strings.ContainsAny(stdout+stderr, "\x1b\x07") || !strings.Contains(stdout, `alice\x1b[2J`) {
		t.Fatalf("exit %d, the key must be shown escaped:\n%q", code, stdout)
	}
	stdout, stderr, code = run(t, "x."+esc+".y\n", "plan", "-f", seedFile, "--keys", "-")
	if code != ExitUsage || strings.ContainsAny(stdout+stderr, "\x1b\x07") || !strings.Contains(stderr, `\x1b[2J`) {
		t.Fatalf("exit %d, the bad line must be quoted escaped: %q", code, stderr)
	}
	_, stderr, code = run(t, "", "plan", "-f", "no-such-"+esc+".yaml")
	if code != ExitUsage || strings.ContainsAny(stderr, "\x1b\x07") {
		t.Fatalf("exit %d, a file name is escaped in the error: %q", code, stderr)
	}
}

// TestPlanLongLine: a keys line over 1 MiB is refused naming the line, with
// a short message (no "bufio.Scanner: token too long", no 1 MiB echo).
func TestPlanLongLine(t *testing.T) {
	stdin := "alice\n" + strings.Repeat("k", 2<<20) + "\nbob\n"
	for _, format := range []string{"table", "json"} {
		stdout, stderr, code := run(t, stdin, "plan", "-f", seedFile, "--keys", "-", "-o", format)
		if code != ExitUsage || stdout != "" || !strings.Contains(stderr, "--keys stdin: line 2 is longer than 1 MiB") || len(stderr) > 300 {
			t.Fatalf("-o %s: exit %d, %d bytes of stderr: %.300q", format, code, len(stderr), stderr)
		}
	}
}
