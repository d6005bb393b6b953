package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

func streamExists(t *testing.T, js jetstream.JetStream, name string) bool {
	t.Helper()
	_, err := js.Stream(context.Background(), name)
	return err == nil
}

// TestApplyWorkflow: dry run (exit 3, nothing created), apply, a second
// apply that says there is nothing to do (exit 0), a dry run that agrees.
func TestApplyWorkflow(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	t.Setenv("NATS_URL", srv.URL())

	code, out, errs := lanes(t, append([]string{"apply", "--dry-run"}, seed...)...)
	if code != commands.ExitChanges || !strings.Contains(out, "create") || errs != "" {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	if streamExists(t, js, "ORDERS") {
		t.Fatal("a dry run created the stream")
	}
	code, out, errs = lanes(t, append([]string{"apply"}, seed...)...)
	if code != 0 || !strings.Contains(out, "stream created; 8 lanes created") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = lanes(t, append([]string{"apply"}, seed...)...)
	if code != 0 || !strings.Contains(out, "Nothing to do") || strings.Contains(out, "Applied") {
		t.Fatalf("second apply: exit %d\n%s", code, out)
	}
	code, out, _ = lanes(t, append([]string{"plan", "--server", srv.URL()}, seed...)...) // plan --server shows the diff
	if code != 0 || !strings.Contains(out, "Nothing to do") {
		t.Fatalf("plan --server after apply: exit %d\n%s", code, out)
	}
}

// TestApplyNeedsConfirmation: without a terminal and without --yes, a
// change to an existing stream is refused (exit 4) and nothing changes.
func TestApplyNeedsConfirmation(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	base := append([]string{"apply", "--server", srv.URL()}, seed...)
	if code, _, errs := lanes(t, base...); code != 0 {
		t.Fatalf("fresh apply needs no confirmation: exit %d %s", code, errs)
	}
	code, _, errs := lanes(t, append(base, "--max-ack-pending", "2")...)
	if code != commands.ExitRefused || !strings.Contains(errs, "--yes") {
		t.Fatalf("want exit 4 naming --yes, got %d: %s", code, errs)
	}
	c, _ := js.Consumer(context.Background(), "ORDERS", "orders-n8-00")
	if c.CachedInfo().Config.MaxAckPending != 1 {
		t.Fatal("a refused apply changed a lane")
	}
	if code, _, errs = lanes(t, append(base, "--max-ack-pending", "2", "--yes")...); code != 0 {
		t.Fatalf("with --yes: exit %d %s", code, errs)
	}
}

// TestApplyImmutableAndRecreate: an immutable change exits 4 with the
// field named; --recreate applies it.
func TestApplyImmutableAndRecreate(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	base := append([]string{"apply", "--yes", "--server", srv.URL()}, seed...)
	lanes(t, base...)
	code, out, errs := lanes(t, append(base, "--max-waiting", "16")...)
	if code != commands.ExitRefused || !strings.Contains(errs, "max_waiting 512 -> 16") || !strings.Contains(out, "(immutable)") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = lanes(t, append(base, "--max-waiting", "16", "--recreate")...)
	if code != 0 || !strings.Contains(out, "8 lanes recreated") || !strings.Contains(out, "restarts at stream seq 1") {
		t.Fatalf("recreate: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestApplyJSON: -o json is one document with stable names, for scripts.
func TestApplyJSON(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	var doc struct {
		Server  string `json:"server"`
		DryRun  bool   `json:"dry_run"`
		Pending bool   `json:"changes_pending"`
		Diff    struct {
			Stream struct {
				Action string `json:"action"`
			} `json:"stream"`
			Lanes []struct {
				Name    string `json:"name"`
				Action  string `json:"action"`
				Changes []struct {
					Field string          `json:"field"`
					Old   json.RawMessage `json:"old"`
					New   json.RawMessage `json:"new"`
				} `json:"changes"`
			} `json:"lanes"`
		} `json:"diff"`
		Result *struct {
			Created       int   `json:"created"`
			Updated       int   `json:"updated"`
			WriteRequests int64 `json:"write_requests"`
		} `json:"result"`
	}
	run := func(wantCode int, extra ...string) {
		t.Helper()
		code, out, errs := lanes(t, append(append([]string{"apply", "--yes", "-o", "json", "--server", srv.URL()}, seed...), extra...)...)
		if code != wantCode {
			t.Fatalf("exit %d (want %d): %s", code, wantCode, errs)
		}
		doc.Result = nil
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
	}
	run(commands.ExitChanges, "--dry-run")
	if !doc.DryRun || !doc.Pending || doc.Diff.Stream.Action != "create" || len(doc.Diff.Lanes) != 8 || doc.Result != nil {
		t.Fatalf("dry run doc %+v", doc)
	}
	run(0)
	if doc.Result == nil || doc.Result.Created != 8 {
		t.Fatalf("apply doc %+v", doc)
	}
	run(0, "--ack-wait", "45s")
	l := doc.Diff.Lanes[0]
	if l.Action != "update" || len(l.Changes) != 1 || l.Changes[0].Field != "ack_wait" || string(l.Changes[0].New) != "45000000000" || doc.Result.Updated != 8 {
		t.Fatalf("update doc %+v %+v", l, doc.Result)
	}
	run(0, "--ack-wait", "45s")
	if doc.Pending || doc.Result.WriteRequests != 0 {
		t.Fatalf("no-op doc pending=%v writes=%d", doc.Pending, doc.Result.WriteRequests)
	}
}

// TestApplyRepartitionDrainTimeout: old lanes with a backlog and no
// workers: apply stops at --drain-timeout with exit 5, and says so.
func TestApplyRepartitionDrainTimeout(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	base := append([]string{"apply", "--yes", "--server", srv.URL()}, seed...)
	lanes(t, base...)
	for i := 0; i < 20; i++ {
		if _, err := js.Publish(context.Background(), fmt.Sprintf("msgs.received_from.u%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := lanes(t, append(base, "--partitions", "4", "--drain-timeout", "200ms")...)
	if code != commands.ExitIncomplete || !strings.Contains(errs, "20 messages to process") || !strings.Contains(out, "20 messages left") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = lanes(t, append(base, "--partitions", "16", "--dry-run")...)
	if code != commands.ExitRefused || !strings.Contains(errs, "repartition") {
		t.Fatalf("third count: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestApplyUsage: bad flags exit 2 before any connection.
func TestApplyUsage(t *testing.T) {
	cleanEnv(t)
	for _, args := range [][]string{
		append([]string{"apply", "--concurrency", "0"}, seed...),
		append([]string{"apply", "-o", "yaml"}, seed...),
		append([]string{"apply", "extra"}, seed...),
		append([]string{"apply", "--lock-ttl", "1500ms"}, seed...),
		append([]string{"apply", "--lock-timeout", "-1s"}, seed...),
		{"apply", "--partitions", "0", "--subject", "a.*", "--name", "x"},
	} {
		if code, _, errs := lanes(t, args...); code != commands.ExitUsage {
			t.Fatalf("lanes %v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
	code, out, _ := lanes(t, "apply", "--help")
	if code != 0 || !strings.Contains(out, "--dry-run") || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--recreate") || !strings.Contains(out, "--lock-timeout") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
}

// TestApplyClusterUnavailableLane: the CLI on a 3-node cluster with one
// node down reports the lanes it cannot reach (exit 5) instead of hanging.
func TestApplyClusterUnavailableLane(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster losing a node")
	}
	cleanEnv(t)
	cl := natstest.StartCluster(t, 3)
	base := append([]string{"apply", "--yes", "--replicas", "3", "--lane-replicas", "1"}, seed...)
	if code, _, errs := lanes(t, append(base, "--server", cl.URLs())...); code != 0 {
		t.Fatalf("fresh apply on the cluster: exit %d %s", code, errs)
	}
	// Stop a node that leads at least one lane (R1 lanes may all sit
	// elsewhere), keeping the others as the URLs to use.
	victim := laneLeaderNode(t, cl)
	var up []string
	for i, s := range cl.Servers {
		if i != victim {
			up = append(up, s.ClientURL())
		}
	}
	cl.Servers[victim].Stop()
	cl.WaitForMetaLeader()
	var code int
	var out, errs string
	for attempt := 0; attempt < 5; attempt++ { // the stream may still be electing a leader
		if code, out, errs = lanes(t, append(base, "--server", strings.Join(up, ","), "--timeout", "8s", "--max-deliver", "9")...); code == commands.ExitIncomplete {
			break
		}
	}
	if code != commands.ExitIncomplete || !strings.Contains(out, "unavailable") || !strings.Contains(errs, "could not be read") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
}

// laneLeaderNode is the index of a cluster node that leads one of the seed
// design's lanes.
func laneLeaderNode(t *testing.T, cl *natstest.Cluster) int {
	t.Helper()
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Cluster == nil {
			continue
		}
		for i, s := range cl.Servers {
			if s.Opts.ServerName == ci.Cluster.Leader {
				return i
			}
		}
	}
	t.Fatalf("no lane leader found: %v", lister.Err())
	return -1
}

// applyDoc is the part of apply's JSON document scripts rely on to know
// why nothing (or not everything) happened.
type applyDoc struct {
	Pending           bool     `json:"changes_pending"`
	Status            string   `json:"status"`
	Refused           bool     `json:"refused"`
	Reasons           []string `json:"reasons"`
	NeedsConfirmation bool     `json:"needs_confirmation"`
	Remaining         []string `json:"remaining"`
	LockHolder        *struct {
		PID    int    `json:"pid"`
		Design string `json:"design"`
	} `json:"lock_holder"`
	Result *struct {
		Created int `json:"created"`
	} `json:"result"`
}

// TestApplyJSONSaysWhyNothingHappened: a refused apply's document says
// that changes are pending, that it refused and why; without a terminal
// and without --yes it says a confirmation was needed.
func TestApplyJSONSaysWhyNothingHappened(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	base := append([]string{"apply", "-o", "json", "--server", srv.URL()}, seed...)
	if code, _, errs := lanes(t, append(base, "--yes")...); code != 0 {
		t.Fatalf("exit %d %s", code, errs)
	}
	decode := func(out string) applyDoc {
		t.Helper()
		var doc applyDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		return doc
	}

	code, out, _ := lanes(t, append(base, "--yes", "--max-waiting", "16")...)
	doc := decode(out)
	if code != commands.ExitRefused || !doc.Pending || !doc.Refused || doc.Status != "refused" || len(doc.Reasons) == 0 || !strings.Contains(doc.Reasons[0], "max_waiting") {
		t.Fatalf("immutable change without --recreate: exit %d %+v", code, doc)
	}

	code, out, _ = lanes(t, append(base, "--ack-wait", "45s")...)
	doc = decode(out)
	if code != commands.ExitRefused || !doc.Pending || !doc.Refused || !doc.NeedsConfirmation || len(doc.Reasons) == 0 || !strings.Contains(doc.Reasons[0], "--yes") {
		t.Fatalf("no terminal, no --yes: exit %d %+v", code, doc)
	}

	code, out, _ = lanes(t, append(base, "--ack-wait", "45s", "--dry-run")...)
	if doc = decode(out); code != commands.ExitChanges || !doc.Pending || doc.Refused || !doc.NeedsConfirmation || doc.Status != "pending" {
		t.Fatalf("dry run: exit %d %+v", code, doc)
	}

	conn, err := connect.Open(context.Background(), connect.Options{Server: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lock, err := converge.AcquireLock(context.Background(), conn, "ORDERS", converge.LockOwner{Host: "elsewhere", PID: 4242, Design: "orders", Command: "lanes apply"}, converge.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	code, out, _ = lanes(t, append(base, "--ack-wait", "45s", "--yes")...)
	doc = decode(out)
	if code != commands.ExitRefused || !doc.Refused || !doc.Pending || doc.LockHolder == nil || doc.LockHolder.PID != 4242 || len(doc.Reasons) == 0 || !strings.Contains(doc.Reasons[0], "locked") {
		t.Fatalf("another apply holds the lock: exit %d %+v", code, doc)
	}
	// Dry runs and plan --server take no lock.
	if code, _, errs := lanes(t, append(base, "--ack-wait", "45s", "--dry-run")...); code != commands.ExitChanges {
		t.Fatalf("a dry run while another apply holds the lock: exit %d %s", code, errs)
	}
	if code, _, errs := lanes(t, append([]string{"plan", "--server", srv.URL(), "--ack-wait", "45s"}, seed...)...); code != commands.ExitChanges {
		t.Fatalf("plan --server while another apply holds the lock: exit %d %s", code, errs)
	}
}

// TestApplyRefusesWhatTheServerCannotHold: replicas 3 on a single server
// is refused by the dry run and by apply before anything is written.
func TestApplyRefusesWhatTheServerCannotHold(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	base := append([]string{"apply", "--yes", "--server", srv.URL(), "--replicas", "3"}, seed...)
	code, out, errs := lanes(t, append(base, "--dry-run")...)
	if code != commands.ExitRefused || !strings.Contains(errs, "not clustered") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = lanes(t, base...)
	if code != commands.ExitRefused || strings.Contains(out, "Applied") || !strings.Contains(errs, "not clustered") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}
	if streamExists(t, js, "ORDERS") {
		t.Fatal("a refused apply created the stream")
	}
}

// TestApplyProgressInLogs: without a terminal (a CI log), a repartition
// says on stderr while it drains that it is draining and how much is
// left, and its end; stdout keeps the diff and the result alone.
func TestApplyProgressInLogs(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	base := append([]string{"apply", "--yes", "--server", srv.URL()}, seed...)
	if code, _, errs := lanes(t, base...); code != 0 || !strings.Contains(errs, "apply: lanes 8/8 (100%)") {
		t.Fatalf("fresh apply: exit %d\n%s", code, errs)
	}
	for i := 0; i < 20; i++ {
		if _, err := js.Publish(context.Background(), fmt.Sprintf("msgs.received_from.u%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var out, errs testutil.Buffer
	done := make(chan int, 1)
	go func() {
		done <- commands.Main(append([]string{"lanes"}, append(base, "--partitions", "4")...), strings.NewReader(""), &out, &errs)
	}()
	testutil.WaitFor(t, "a progress line while the old lanes wait for workers", 30*time.Second, func() bool { return strings.Contains(errs.String(), "apply: old lanes' backlog processed 0/20 (0%)") })
	select {
	case code := <-done:
		t.Fatalf("apply ended (exit %d) before the old lanes drained", code)
	default:
	}
	for part := 0; part < 8; part++ { // a worker processes the old lanes
		lane := fmt.Sprintf("orders-n8-%02d", part)
		for {
			c, err := js.Consumer(context.Background(), "ORDERS", lane)
			if err != nil {
				t.Fatal(err)
			}
			if c.CachedInfo().NumPending+uint64(c.CachedInfo().NumAckPending) == 0 {
				break
			}
			natstest.Fetch(t, js, "ORDERS", lane, 1, true)
		}
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out.String(), errs.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("apply did not finish after the drain")
	}
	for _, want := range []string{"apply: old lanes' backlog processed 20/20 (100%)", "apply: deleting lanes 8/8 (100%)"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("no %q in stderr:\n%s", want, errs.String())
		}
	}
	if strings.Contains(out.String(), "apply:") || strings.Contains(errs.String(), "\r") {
		t.Errorf("progress on stdout, or drawn as bars:\n%s\n%q", out.String(), errs.String())
	}
}

// TestApplyStreamOverlapSaysNothingChanged: the server refuses to create
// the stream (its subjects overlap another stream's): the result says
// nothing was changed, not "Partly applied ... nothing changed" (issue 15.12).
func TestApplyStreamOverlapSaysNothingChanged(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"msgs.>"}}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := lanes(t, applyArgs("--server", srv.URL())...)
	if code == 0 || !strings.Contains(errs, "overlap") {
		t.Fatalf("exit %d, want the server's overlap error\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out, "Partly applied") || !strings.Contains(out, "Nothing was changed") {
		t.Fatalf("the result must say nothing was changed:\n%s", out)
	}
	if streamExists(t, js, "ORDERS") {
		t.Fatal("the stream exists")
	}
}
