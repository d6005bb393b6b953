package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
)

func simMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(append([]string{"lanes"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

type simDoc struct {
	Mode     string `json:"mode"`
	Workload struct {
		Keys     int    `json:"keys"`
		KeysFrom string `json:"keys_from"`
		Messages int    `json:"messages"`
	} `json:"workload"`
	Results []map[string]any `json:"results"`
}

func simJSON(t *testing.T, args ...string) simDoc {
	t.Helper()
	code, out, errs := simMain(t, append([]string{"simulate", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc simDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return doc
}

func simNum(t *testing.T, r map[string]any, field string) float64 {
	t.Helper()
	v, ok := r[field].(float64)
	if !ok {
		t.Fatalf("result has no number %q: %v", field, r)
	}
	return v
}

func TestSimulateSeedStoryTable(t *testing.T) {
	code, out, errs := simMain(t, "simulate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"design orders, 8 lanes", "alice, bob, carol", "lanes: 2.9x the throughput of single; per-key order held"} {
		if !strings.Contains(out, want) {
			t.Errorf("seed story lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "unordered") || !strings.Contains(errs, "lanes simulate --live") {
		t.Errorf("seed story compares single and lanes only, and suggests --live on stderr:\n%s\n%s", out, errs)
	}
}

func TestSimulateSeedStoryJSON(t *testing.T) {
	doc := simJSON(t)
	if doc.Mode != "model" || len(doc.Results) != 2 || doc.Workload.Keys != 3 {
		t.Fatalf("seed story JSON: mode %q, %d results, %d keys", doc.Mode, len(doc.Results), doc.Workload.Keys)
	}
	for _, r := range doc.Results {
		for _, f := range []string{"strategy", "partitions", "messages", "throughput", "latency_p50_ms", "latency_p99_ms", "order_violations", "duplicates", "hottest_lane"} {
			if _, ok := r[f]; !ok {
				t.Errorf("result lacks %q: %v", f, r)
			}
		}
	}
	single, lanesRes := doc.Results[0], doc.Results[1]
	if single["strategy"] != "single" || lanesRes["strategy"] != "lanes" || simNum(t, lanesRes, "partitions") != 8 {
		t.Fatalf("results %v %v", single["strategy"], lanesRes["strategy"])
	}
	if ratio := simNum(t, lanesRes, "throughput") / simNum(t, single, "throughput"); ratio < 2.5 || ratio > 3 {
		t.Fatalf("lanes / single throughput %.2f: three keys in three lanes should give nearly 3x", ratio)
	}
	if simNum(t, lanesRes, "order_violations") != 0 || simNum(t, single, "order_violations") != 0 {
		t.Fatal("per-key order must hold for single and lanes")
	}
}

func TestSimulateComparesStrategiesDeterministically(t *testing.T) {
	args := []string{"--name", "users", "--subject", "users.*.events", "--partitions", "4", "--workers", "2", "--keys", "uniform:20",
		"--messages", "2000", "--process-time", "exp:5ms", "--crash", "0.05", "--ack-wait", "50ms", "--seed", "3"}
	doc := simJSON(t, args...)
	if len(doc.Results) != 4 {
		t.Fatalf("%d results, want the four strategies", len(doc.Results))
	}
	byName := map[string]map[string]any{}
	for _, r := range doc.Results {
		byName[r["strategy"].(string)] = r
	}
	if simNum(t, byName["lanes"], "order_violations") != 0 || simNum(t, byName["unordered"], "order_violations") == 0 {
		t.Fatal("lanes must keep order and unordered must not")
	}
	if simNum(t, byName["lanes"], "crashes") == 0 || simNum(t, byName["lanes"], "unfinished") != 0 {
		t.Fatal("crashes must be redelivered, none lost")
	}
	_, a, _ := simMain(t, append([]string{"simulate", "-o", "json"}, args...)...)
	_, b, _ := simMain(t, append([]string{"simulate", "-o", "json"}, args...)...)
	if a != b {
		t.Fatal("the same flags gave different results")
	}
}

// Every bad value is a usage error (exit 2) naming the flag and the value,
// with nothing on stdout.
func TestSimulateUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badKeys := filepath.Join(dir, "keys.txt")
	os.WriteFile(badKeys, []byte("msgs.received_from.alice\nnot.a.match.here\n"), 0o644)
	cases := map[string][]string{
		`--process-time "fast"`:                        {"--process-time", "fast"},
		`--process-time "exp:0"`:                       {"--process-time", "exp:0"},
		`--keys "zipf:10"`:                             {"--keys", "zipf:10"},
		`--keys "normal:5"`:                            {"--keys", "normal:5"},
		"--messages 0":                                 {"--messages", "0"},
		"--rate -1":                                    {"--rate", "-1"},
		"--crash 1.5":                                  {"--crash", "1.5"},
		"--workers 0":                                  {"--workers", "0"},
		`unknown strategy "fast"`:                      {"--strategy", "lanes,fast"},
		"--lease-ttl 1.5s: must be whole seconds":      {"--strategy", "kv-lease", "--lease-ttl", "1500ms"},
		"--lease-ttl belongs to the kv-lease strategy": {"--lease-ttl", "5s"},
		"--round-trip belongs to the kv-lease":         {"--strategy", "lanes", "--round-trip", "1ms"},
		"--lease-retry 0s: must be a positive":         {"--strategy", "kv-lease", "--lease-retry", "0s"},
		"--round-trip -1ms: cannot be negative":        {"--strategy", "kv-lease", "--round-trip", "-1ms"},
		`--sweep "9..3"`:                               {"--sweep", "9..3"},
		`--sweep "a..b"`:                               {"--sweep", "a..b"},
		`--plot "chart.gif"`:                           {"--sweep", "1..4", "--plot", "chart.gif"},
		"--target-rate":                                {"--target-rate", "100"},
		`--from-stream "ORDERS"`:                       {"--from-stream", "ORDERS"},
		"--keep":                                       {"--keep"},
		"--sweep runs the model":                       {"--sweep", "1..4", "--live"},
		"--keys file:":                                 {"--keys", "file:" + filepath.Join(dir, "missing.txt")},
		"line 2":                                       {"--keys", "file:" + badKeys},
		"--output":                                     {"-o", "yaml"},
		"partitions":                                   {"--partitions", "0"},
		"no arguments":                                 {"extra"},
		"--keys is empty":                              {"--keys", ""},
		"--from-stream is empty":                       {"--from-stream", "", "-s", "nats://127.0.0.1:1"},
		"not a valid stream name":                      {"--from-stream", "A.B", "-s", "nats://127.0.0.1:1"},
		"--target-p99 0s":                              {"--sweep", "1..4", "--target-p99", "0s"},
		"--keys file: names no file":                   {"--keys", "file:"},
		"--sweep-keys-in-flight belongs to a sweep":    {"--sweep-keys-in-flight", "1,8"},
		"--server-cores belongs to a sweep":            {"--server-cores", "4"},
		"--server-cores -1: must be 0":                 {"--sweep", "1..2", "--server-cores", "-1"},
		`--sweep-keys-in-flight "0..4"`:                {"--sweep", "1..2", "--sweep-keys-in-flight", "0..4"},
		"at most 1024 keys in flight":                  {"--sweep", "1..2", "--sweep-keys-in-flight", "2000"},
		`--sweep-keys-in-flight "1,x"`:                 {"--sweep", "1..2", "--sweep-keys-in-flight", "1,x"},
		`--sweep "3,a"`:                                {"--sweep", "3,a"},
		"--sweep-keys-in-flight 8: --max-ack-pending: lane.max_ack_pending": {"--max-ack-pending", "4", "--sweep", "1..2", "--sweep-keys-in-flight", "1,8"},
		`--failing-key "alice": write KEY:N`:                                {"--failing-key", "alice"},
		`--failing-key "alice:0": N`:                                        {"--failing-key", "alice:0"},
		`--failing-key "nobody": no such key`:                               {"--failing-key", "nobody:1"},
		"lane.keys_in_flight":                                               {"--keys-in-flight", "0"},
	}
	for want, args := range cases {
		code, out, errs := simMain(t, append([]string{"simulate"}, args...)...)
		if code != ExitUsage || out != "" || !strings.Contains(errs, want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 naming %s", args, code, out, errs, want)
		}
	}
}

// TestSimulateSizesRefused: sizes that cannot fit in memory are refused
// at once, before anything is allocated, with the memory they would need.
func TestSimulateSizesRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--messages", "1000000000"}, "would need about 238.42 GiB of memory"},
		{[]string{"--workers", "100000000"}, "--workers 100000000: a simulation runs at most 16384 workers"},
		{[]string{"--partitions", "4096", "--workers", "8"}, "32768 workers in all"},
		{[]string{"--sweep", "1..4096", "--workers", "8"}, "32768 workers in all"},
		{[]string{"--keys", "uniform:100000000"}, "between 1 and 1000000"},
		{[]string{"--messages", "10000000", "--keys", "uniform:1000000", "--partitions", "16384"}, "would need about 3.01 GiB of memory; a simulation may use 3.00 GiB"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		code, out, errs := simMain(t, append([]string{"simulate"}, tc.args...)...)
		runtime.ReadMemStats(&after)
		if code != ExitUsage || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
		// Refused before anything was allocated: the smallest of these
		// runs would allocate gigabytes.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
			t.Errorf("%v: refused after allocating %d MiB", tc.args, grew>>20)
		}
	}
}

func TestSimulateKeysFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.txt")
	os.WriteFile(path, []byte("# user counts\nalice 90\nmsgs.received_from.bob 5\ncarol 5\n"), 0o644)
	doc := simJSON(t, "--keys", "file:"+path, "--strategy", "lanes")
	r := doc.Results[0]
	if doc.Workload.Keys != 3 || r["hottest_key"] != "alice" || simNum(t, r, "hottest_key_share") < 0.8 {
		t.Fatalf("keys %d, hottest %v at %v; want alice with about 90%%", doc.Workload.Keys, r["hottest_key"], r["hottest_key_share"])
	}
}

func TestSimulateMultiTokenKeys(t *testing.T) {
	doc := simJSON(t, "-f", "../examples/device-events/lanes.yaml", "--keys", "zipf:50:1", "--strategy", "lanes")
	if doc.Workload.Keys != 50 || doc.Results[0]["partitions"].(float64) != 12 {
		t.Fatalf("device events: %d keys, %v partitions", doc.Workload.Keys, doc.Results[0]["partitions"])
	}
}

func TestSimulateSweep(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	args := []string{"simulate", "--keys", "uniform:64", "--messages", "2000", "--process-time", "10ms", "--sweep", "1..12", "--target-rate", "300", "--plot", plot}
	code, out, errs := simMain(t, args...)
	if code != 0 || !strings.Contains(out, "Recommended: ") || !strings.Contains(errs, "wrote the sweep chart") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if b, err := os.ReadFile(plot); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("plot not written: %v", err)
	}
	code, out, _ = simMain(t, append(args[:len(args)-2], "-o", "json")...)
	var doc struct {
		Sweep struct {
			Recommended int `json:"recommended"`
			Points      []struct {
				Capacity float64 `json:"capacity"`
			} `json:"points"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	// 375/s with 10ms each needs at least 4 busy lanes' worth of capacity.
	if r := doc.Sweep.Recommended; r < 4 || doc.Sweep.Points[r-1].Capacity < 375 || doc.Sweep.Points[r-2].Capacity >= 375 {
		t.Fatalf("recommended %d with capacities %v", r, doc.Sweep.Points)
	}
}

// --keys-in-flight reaches the model: one lane of 32 keys in flight runs
// 1,000 keys with a 1ms handler at 25x and more the serial consumer (the
// issue's first benchmark), in order; the output names K.
func TestSimulateKeysInFlight(t *testing.T) {
	args := []string{"--partitions", "1", "--keys-in-flight", "32", "--keys", "uniform:1000", "--messages", "4000", "--process-time", "1ms", "--strategy", "single,lanes"}
	code, out, errs := simMain(t, append([]string{"simulate"}, args...)...)
	if code != 0 || !strings.Contains(out, "1 lane x 1 worker, 32 keys in flight per lane") {
		t.Fatalf("exit %d, the heading does not name K:\n%s\n%s", code, out, errs)
	}
	code, out, errs = simMain(t, append([]string{"simulate", "-o", "json"}, args...)...)
	var doc struct {
		KeysInFlight int            `json:"keys_in_flight"`
		Results      []judge.Result `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, errs)
	}
	single, lanes := doc.Results[0], doc.Results[1]
	if doc.KeysInFlight != 32 || lanes.KeysInFlight != 32 || single.KeysInFlight != 0 {
		t.Fatalf("keys in flight: report %d, lanes %d, single %d", doc.KeysInFlight, lanes.KeysInFlight, single.KeysInFlight)
	}
	if ratio := lanes.Throughput / single.Throughput; ratio < 25 || lanes.OrderViolations != 0 || lanes.Completed != 4000 {
		t.Fatalf("K=32: %.1fx the serial consumer, %d violations, %d completed; want at least 25x, 0, 4000", ratio, lanes.OrderViolations, lanes.Completed)
	}
	// Without the key gate, the same max ack pending breaks order.
	doc2 := simJSON(t, "--partitions", "1", "--max-ack-pending", "32", "--workers", "32", "--keys", "zipf:50:1", "--messages", "2000", "--process-time", "exp:1ms", "--strategy", "lanes")
	if simNum(t, doc2.Results[0], "order_violations") == 0 {
		t.Fatal("max ack pending 32 without keys in flight keeps order: the comparison shows nothing")
	}
}

// A failing key on a key-parallel lane holds its own key: its first
// message fails N times and the verdict counts them; order holds.
func TestSimulateFailingKey(t *testing.T) {
	doc := simJSON(t, "--partitions", "1", "--keys-in-flight", "8", "--keys", "uniform:20", "--messages", "200", "--process-time", "1ms",
		"--ack-wait", "100ms", "--failing-key", "key-03:2", "--strategy", "lanes")
	r := doc.Results[0]
	if simNum(t, r, "crashes") != 2 || simNum(t, r, "order_violations") != 0 || simNum(t, r, "completed") != 200 {
		t.Fatalf("failing key-03: %v", r)
	}
	code, out, _ := simMain(t, "simulate", "--keys", "uniform:20", "--failing-key", "key-03:2", "--strategy", "lanes")
	if code != 0 || !strings.Contains(out, "key-03's first message fails 2 attempts") {
		t.Fatalf("exit %d, the workload line does not name the failing key:\n%s", code, out)
	}
}

// The sweep recommends partitions and keys in flight together: for 1,000
// keys and a 1ms handler, 16 lanes of 64 keys in flight beat 1,024 serial
// lanes, which the server's CPU per message (measured: about 550µs at
// 1,024 lanes) holds to about 2,500/s: past the server's peak.
func TestSimulateSweepKeysInFlight(t *testing.T) {
	args := []string{"simulate", "--keys", "uniform:1000", "--messages", "20000", "--process-time", "1ms",
		"--sweep", "16,1024", "--sweep-keys-in-flight", "1,64", "--target-rate", "20000"}
	code, out, errs := simMain(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"16, 1024 partitions x keys in flight 1, 64", "KEYS IN FLIGHT", "SERVER CPU/MSG",
		"Recommended: 16 partitions with 64 keys in flight", "Fewer lanes win: the best serial layout tried, 1024 lanes, drains at most ",
		"Past 16 serial lanes, more lanes only slow the server down: 1024 serial lanes drain at most "} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = simMain(t, append(args, "-o", "json")...)
	var doc struct {
		Sweep struct {
			Recommended  int   `json:"recommended"`
			RecommendedK int   `json:"recommended_keys_in_flight"`
			KeysInFlight []int `json:"keys_in_flight"`
			Server       struct {
				Cores    float64                  `json:"cores"`
				Measured []planner.ServerCPUPoint `json:"measured"`
			} `json:"server"`
			Points []struct {
				Partitions     int     `json:"partitions"`
				KeysInFlight   int     `json:"keys_in_flight"`
				Capacity       float64 `json:"capacity"`
				Limit          string  `json:"limit"`
				PastServerPeak bool    `json:"past_server_peak"`
			} `json:"points"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	sw := doc.Sweep
	if sw.Recommended != 16 || sw.RecommendedK != 64 || len(sw.Points) != 4 || len(sw.KeysInFlight) != 2 ||
		sw.Server.Cores != model.DefaultServerCost.Cores || !reflect.DeepEqual(planner.ServerCPUCurve(sw.Server.Measured), planner.MeasuredServerCPU) {
		t.Fatalf("%+v", sw)
	}
	if p16, p1024 := sw.Points[1], sw.Points[2]; p16.KeysInFlight != 64 || p1024.Partitions != 1024 || p1024.Limit != "server" || !p1024.PastServerPeak || p16.PastServerPeak || p16.Capacity < 2*p1024.Capacity {
		t.Fatalf("16 x 64 %+v against 1024 serial %+v: want at least 2x", p16, p1024)
	}
	// --server-cores 0 leaves the server out: 1,024 serial lanes are then
	// bound by their lanes only, and meet the target too.
	code, out, _ = simMain(t, append(args, "--server-cores", "0")...)
	if code != 0 || strings.Contains(out, "SERVER CPU/MSG") || !strings.Contains(out, "1024 serial lanes would meet the targets too") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// A fake live runner checks what it is asked and that its results are
// shown beside the model's.
func TestSimulateLiveShowsModelBeside(t *testing.T) {
	t.Setenv("NATS_URL", "") // no server named: the live runner is to embed one
	t.Setenv("NATS_CONTEXT", "")
	var got live.Options
	defer func(f func(context.Context, live.Options) ([]judge.Result, error)) { runLive = f }(runLive)
	runLive = func(ctx context.Context, req live.Options) ([]judge.Result, error) {
		got = req
		req.Progress("lanes", 1, 2)
		var out []judge.Result
		for _, s := range req.Strategies {
			out = append(out, judge.Result{Strategy: s.Name, Partitions: 8, Messages: len(req.Workload.Messages), Throughput: 42, FinalStateCorrect: true})
		}
		return out, nil
	}
	code, out, errs := simMain(t, "simulate", "--live", "--workers", "2", "--in-progress", "--keep")
	if code != 0 || !strings.Contains(out, "(model)") || !strings.Contains(out, "42.0/s") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if got.ServerGiven || got.WorkersPerLane != 2 || !got.InProgress || !got.Keep || got.Plan.Design.Partitions != 8 ||
		strings.Join(strategy.NamesOf(got.Strategies), ",") != "single,lanes" || got.Plan.Design.Lane.AckWait.D() != planner.DefaultAckWait || len(got.Workload.Messages) != 1000 {
		t.Fatalf("live request %+v", got)
	}
	doc := simJSON(t, "--live")
	m, ok := doc.Results[1]["model"].(map[string]any)
	if doc.Mode != "live" || !ok || simNum(t, doc.Results[1], "throughput") != 42 || m["throughput"].(float64) < 250 {
		t.Fatalf("live JSON: %+v", doc)
	}
}

// Ctrl-C during a live run still prints what was measured, then exits 130.
func TestSimulateLiveInterruptedStillReports(t *testing.T) {
	defer func(f func(context.Context, live.Options) ([]judge.Result, error)) { runLive = f }(runLive)
	runLive = func(ctx context.Context, req live.Options) ([]judge.Result, error) {
		return []judge.Result{{Strategy: "single", Messages: 1000, Completed: 400, Throughput: 99}}, context.Canceled
	}
	code, out, _ := simMain(t, "simulate", "--live")
	if code != ExitInterrupted || !strings.Contains(out, "99.0/s") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

// The real thing, end to end: no server named, so an embedded one runs the
// seed story and the live figures appear beside the model's.
func TestSimulateLiveEmbedded(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, errs := simMain(t, "simulate", "--live", "--messages", "90", "--process-time", "2ms", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var doc struct {
		Mode    string
		Server  string
		Results []struct {
			Strategy        string
			Completed       int
			OrderViolations int `json:"order_violations"`
			Model           *struct{ Throughput float64 }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Mode != "live" || doc.Server != "embedded" || len(doc.Results) != 2 {
		t.Fatalf("live document: %s", out)
	}
	for _, r := range doc.Results {
		if r.Completed != 90 || r.OrderViolations != 0 || r.Model == nil || r.Model.Throughput <= 0 {
			t.Fatalf("%s: %+v", r.Strategy, r)
		}
	}
	// Without a terminal, progress is plain lines on stderr, one per
	// strategy at least, ending with its count done.
	for _, want := range []string{"simulate: live single 90/90", "simulate: live lanes 90/90"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

// --from-stream reads per-subject counts from a real server; the stream
// stores partitioned subjects, which are mapped back to published ones.
func TestSimulateFromStream(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(4))
	ctx := context.Background()
	tr := p.Stream.SubjectTransform
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: p.Stream.Subjects,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: tr.Source, Destination: tr.Destination}}); err != nil {
		t.Fatal(err)
	}
	for user, n := range map[string]int{"alice": 30, "bob": 6, "carol": 3} {
		for range n {
			if _, err := js.Publish(ctx, "msgs.received_from."+user, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	doc := simJSON(t, "--partitions", "4", "--from-stream", "ORDERS", "--server", srv.URL(), "--strategy", "lanes")
	if doc.Workload.Keys != 3 || doc.Workload.KeysFrom != "stream ORDERS" || doc.Results[0]["hottest_key"] != "alice" {
		t.Fatalf("from stream: %+v", doc)
	}
	code, _, errs := simMain(t, "simulate", "--from-stream", "NOPE", "--server", srv.URL())
	if code == 0 || !strings.Contains(errs, "NOPE") {
		t.Fatalf("missing stream: exit %d %s", code, errs)
	}
}

// --strategy kv-lease runs the lease strategy beside the others, with its
// settings in the workload and its own figures in the results.
func TestSimulateKVLease(t *testing.T) {
	doc := simJSON(t, "--strategy", "lanes,kv-lease", "--keys", "zipf:200:1.2", "--messages", "2000", "--lease-ttl", "2s", "--lease-retry", "3ms", "--round-trip", "1ms")
	if len(doc.Results) != 2 || doc.Results[1]["strategy"] != "kv-lease" {
		t.Fatalf("results: %v", doc.Results)
	}
	lease := doc.Results[1]
	if simNum(t, lease, "partitions") != 1 || simNum(t, lease, "workers_per_lane") != 8 || simNum(t, lease, "lease_retries") == 0 {
		t.Fatalf("kv-lease: %v", lease)
	}
	code, out, errs := simMain(t, "simulate", "--strategy", "kv-lease", "--keys", "uniform:50", "--lease-ttl", "2s")
	if code != 0 || !strings.Contains(out, "lease TTL 2s, retry 10ms, round trip 200µs") || !strings.Contains(out, "kv-lease: the baseline") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := simMain(t, "simulate", "--keys", "uniform:50"); code != 0 || strings.Contains(out, "kv-lease") || strings.Contains(out, "lease TTL") {
		t.Fatalf("kv-lease is not a default strategy:\n%s", out)
	}
}

// kv-lease end to end on the embedded server: its settings reach the live
// run, which takes leases in a real bucket and reports beside the model.
func TestSimulateLiveKVLease(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, errs := simMain(t, "simulate", "--live", "--strategy", "kv-lease", "--keys", "uniform:40", "--messages", "80",
		"--process-time", "2ms", "--lease-ttl", "5s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var doc struct {
		Mode     string
		Workload struct {
			LeaseTTL string `json:"lease_ttl"`
		}
		Results []struct {
			Strategy  string
			Completed int
			Model     *struct{ Throughput float64 }
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Mode != "live" || doc.Workload.LeaseTTL != "5s" || len(doc.Results) != 1 || doc.Results[0].Strategy != "kv-lease" ||
		doc.Results[0].Completed != 80 || doc.Results[0].Model == nil {
		t.Fatalf("live kv-lease: %s", out)
	}
}

// The live run says which server it used: a named one by its URL (never
// its user info), else an embedded one; --keep with an embedded server
// warns that nothing will be kept; the seed story's hint repeats the
// user's own flags.
func TestSimulateSaysWhichServer(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := natstest.Start(t)
	named := strings.Replace(srv.URL(), "nats://", "nats://someone:s3cret@", 1)
	code, out, errs := simMain(t, "simulate", "--live", "--messages", "30", "-s", named)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "Live run on "+srv.URL()+" (") {
		t.Errorf("the heading should name %s:\n%s", srv.URL(), out)
	}
	if strings.Contains(out+errs, "s3cret") || strings.Contains(out+errs, "someone") {
		t.Errorf("user info printed:\n%s\n%s", out, errs)
	}

	code, out, errs = simMain(t, "simulate", "--live", "--keep", "--messages", "30")
	if code != 0 || !strings.Contains(out, "Live run on an embedded nats-server") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "--keep keeps nothing here") {
		t.Errorf("--keep on an embedded server should warn; stderr:\n%s", errs)
	}

	code, _, errs = simMain(t, "simulate", "--workers", "2", "--process-time", "80ms", "--ack-wait", "50ms")
	if code != 0 || !strings.Contains(errs, "next: lanes simulate --workers 2 --process-time 80ms --ack-wait 50ms --live") {
		t.Errorf("the hint should repeat the user's flags; exit %d, stderr:\n%s", code, errs)
	}
}
