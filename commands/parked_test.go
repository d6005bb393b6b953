package commands_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// parkedEnv is a design (seed, 2 lanes) with a dead-letter stream and a
// lanes work instance whose handler fails (and so parks, after 2
// attempts) the messages of the keys marked broken, terminates those
// marked terminal, and records what it processed, key by key.
type parkedEnv struct {
	t    *testing.T
	url  string
	js   jetstream.JetStream
	plan *planner.Plan
	base []string // --server URL --stream ORDERS --design orders

	mu       sync.Mutex
	broken   map[string]bool
	terminal map[string]bool
	done     map[string][]int    // per key, the payload numbers processed, in order
	replayed map[string][]string // per key, each processed message's Lanes-Replayed-From-Seq
}

func newParkedEnv(t *testing.T, cluster bool, apply ...string) *parkedEnv {
	t.Helper()
	cleanEnv(t)
	var url string
	extra := append([]string{"--partitions", "2"}, apply...)
	replicas := 1
	if cluster {
		url = natstest.StartCluster(t, 3).URLs()
		extra = append(extra, "--replicas", "3")
		replicas = 3
	} else {
		url = natstest.Start(t).URL()
	}
	e := &parkedEnv{t: t, url: url, plan: applyDesign(t, url, extra...),
		broken: map[string]bool{}, terminal: map[string]bool{}, done: map[string][]int{}, replayed: map[string][]string{}}
	e.base = []string{"--server", url, "--stream", e.plan.Stream.Name, "--design", e.plan.Design.Name}
	_, e.js = natstest.Connect(t, url)
	err := natstest.RetryPlacement(context.Background(), func() error {
		_, err := e.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}, Replicas: replicas})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// startWorker runs a lanes work instance in this process until the test ends.
func (e *parkedEnv) startWorker(instance string) {
	e.t.Helper()
	nc, err := nats.Connect(e.url, nats.MaxReconnects(-1))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	cfg := work.Config{Stream: e.plan.Stream.Name, Design: e.plan.Design.Name, Instance: instance,
		OnPoison: work.Park, DeadLetter: "dlq.orders", ParkAfter: 2}
	w, err := work.New(js, cfg, work.HandlerFunc(e.handle))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx); close(stopped) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			e.t.Errorf("worker %s did not stop", instance)
		}
	})
}

func (e *parkedEnv) handle(_ context.Context, m *work.Msg) error {
	key, n, _ := strings.Cut(string(m.Data), ":")
	i, _ := strconv.Atoi(n)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.terminal[key]:
		return work.Term(errors.New("unknown customer " + key))
	case e.broken[key]:
		return errors.New("cannot process " + key + "\x1b[31m") // an escape, shown escaped
	}
	e.done[key] = append(e.done[key], i)
	e.replayed[key] = append(e.replayed[key], m.Header.Get(actions.HeaderReplayedFromSeq))
	return nil
}

func (e *parkedEnv) set(m map[string]bool, key string, v bool) {
	e.mu.Lock()
	m[key] = v
	e.mu.Unlock()
}

// publish publishes key's messages from..to (payload key:i), returning
// their sequences.
func (e *parkedEnv) publish(key string, from, to int) []uint64 {
	e.t.Helper()
	var seqs []uint64
	for i := from; i <= to; i++ {
		ack, err := e.js.Publish(context.Background(), "msgs.received_from."+key, fmt.Appendf(nil, "%s:%d", key, i))
		if err != nil {
			e.t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

func (e *parkedEnv) processed(key string) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.done[key])
}

// parkedDoc is lanes parked list -o json, as scripts read it.
type parkedDoc struct {
	DeadLetters []struct{ Subject, Stream string } `json:"dead_letters"`
	Messages    []struct {
		Seq       uint64 `json:"seq"`
		OriginSeq uint64 `json:"origin_seq"`
		Lane      string `json:"lane"`
		Key       string `json:"key"`
		Reason    string `json:"reason"`
		Attempts  int    `json:"attempts"`
	} `json:"messages"`
	Counts struct {
		Total    int            `json:"total"`
		ByKey    map[string]int `json:"by_key"`
		ByReason map[string]int `json:"by_reason"`
	} `json:"counts"`
}

func (e *parkedEnv) list(args ...string) parkedDoc {
	e.t.Helper()
	d, code, msg := e.tryList(args...)
	if code != 0 {
		e.t.Fatalf("parked list %v: exit %d\n%s", args, code, msg)
	}
	return d
}

func (e *parkedEnv) tryList(args ...string) (parkedDoc, int, string) {
	e.t.Helper()
	code, out, errs := lanesRun(append(append([]string{"parked", "list"}, e.base...), append(args, "-o", "json")...)...)
	var d parkedDoc
	if code != 0 {
		return d, code, out + errs
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		e.t.Fatalf("%v\n%s", err, out)
	}
	return d, code, ""
}

// run runs lanes parked VERB with the design's flags.
func (e *parkedEnv) run(verb string, args ...string) (int, string, string) {
	return lanesRun(append(append([]string{"parked", verb}, e.base...), args...)...)
}

func (e *parkedEnv) waitParked(n int, args ...string) parkedDoc {
	e.t.Helper()
	var d parkedDoc
	testutil.WaitFor(e.t, fmt.Sprintf("%d parked %v", n, args), 30*time.Second, func() bool {
		var code int
		d, code, _ = e.tryList(args...) // exit 2 until the instance records its dead-letter subject
		return code == 0 && d.Counts.Total == n
	})
	return d
}

func (e *parkedEnv) waitProcessed(key string, want []int) {
	e.t.Helper()
	testutil.WaitFor(e.t, fmt.Sprintf("%s processed %v", key, want), 30*time.Second, func() bool {
		return len(e.processed(key)) >= len(want)
	})
	if got := e.processed(key); !slices.Equal(got, want) {
		e.t.Fatalf("key %s processed %v, want %v", key, got, want)
	}
}

// TestParkedListShowDiscard: list with its filters and counts, show (escaped
// headers, payload), discard with a dry run, and every bad input with one
// clear error and nothing changed.
func TestParkedListShowDiscard(t *testing.T) {
	e := newParkedEnv(t, false)
	// No instance has run: no dead-letter subject is known.
	if code, _, errs := e.run("list"); code != commands.ExitUsage || !strings.Contains(errs, "no dead-letter subject is known") {
		t.Fatalf("before any worker: exit %d %s", code, errs)
	}
	e.set(e.broken, "alice", true)
	e.set(e.terminal, "bob", true)
	e.startWorker("one")
	e.publish("alice", 1, 3)
	bobSeq := e.publish("bob", 1, 1)[0]
	e.publish("carol", 1, 2)
	d := e.waitParked(4)
	e.waitProcessed("carol", []int{1, 2})
	if d.Counts.ByKey["alice"] != 3 || d.Counts.ByKey["bob"] != 1 || d.Counts.ByReason["terminated by the handler"] != 1 || d.Counts.ByReason["failed 2 time(s)"] != 3 {
		t.Fatalf("counts: %+v", d.Counts)
	}
	if len(d.DeadLetters) != 1 || d.DeadLetters[0].Subject != "dlq.orders" || d.DeadLetters[0].Stream != "DLQ" {
		t.Fatalf("dead letters: %+v", d.DeadLetters)
	}
	var bob, alice uint64
	for _, m := range d.Messages {
		if m.Key == "alice" {
			alice = m.Seq
		}
		if m.Key == "bob" {
			bob = m.Seq
			if m.OriginSeq != bobSeq || m.Attempts != 1 {
				t.Fatalf("bob's parked message: %+v (published as %d)", m, bobSeq)
			}
		}
	}
	if got := e.list("--key", "alice").Counts.Total; got != 3 {
		t.Errorf("--key alice: %d", got)
	}
	if got := e.list("--reason", "TERMINATED"); got.Counts.Total != 1 || got.Messages[0].Key != "bob" {
		t.Errorf("--reason terminated: %+v", got)
	}
	if got := e.list("--seq", strconv.FormatUint(bob, 10), "--dead-letter", "dlq.orders"); got.Counts.Total != 1 {
		t.Errorf("--seq: %+v", got)
	}
	lane := d.Messages[0].Lane
	want := 0
	for _, m := range d.Messages {
		if m.Lane == lane {
			want++
		}
	}
	if got := e.list("--lanes", lane).Counts.Total; got != want {
		t.Errorf("--lanes %s: %d, want %d", lane, got, want)
	}
	if got := e.list("--older-than", "1h").Counts.Total; got != 0 {
		t.Errorf("--older-than 1h: %d", got)
	}
	code, table, _ := e.run("list")
	if code != 0 || !strings.Contains(table, "terminated by the handler") || !strings.Contains(table, "by key:    alice 3, bob 1") {
		t.Errorf("table: exit %d\n%s", code, table)
	}

	// show: headers escaped, payload shown.
	code, out, errs := e.run("show", "--seq", strconv.FormatUint(alice, 10))
	if code != 0 || !strings.Contains(out, `\x1b[31m`) || strings.Contains(out, "\x1b[31m") || !strings.Contains(out, "Lanes-Parked-Key: alice") || !strings.Contains(out, "payload (7 bytes)\n  alice:") {
		t.Errorf("show: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = e.run("show", "--seq", strconv.FormatUint(bob, 10), "-o", "json")
	var shown struct {
		Payload string              `json:"payload"`
		Headers map[string][]string `json:"headers"`
		Reason  string              `json:"reason"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.Payload != "bob:1" || shown.Reason != "terminated by the handler" || shown.Headers["Lanes-Parked-Lane"] == nil {
		t.Errorf("show json: exit %d %v\n%s", code, err, out)
	}

	// Bad input: one clear error each, nothing changed.
	for _, bad := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"show", "--seq", "999"}, commands.ExitUsage, "no parked message of design \"orders\" at sequence 999"},
		{[]string{"show", "7"}, commands.ExitUsage, "--seq 7"},
		{[]string{"show"}, commands.ExitUsage, "--seq: name one parked message"},
		{[]string{"discard", "--seq", "999"}, commands.ExitUsage, "no parked message"},
		{[]string{"discard", "--seq", "x"}, commands.ExitUsage, "--seq \"x\""},
		{[]string{"discard"}, commands.ExitUsage, "which parked messages?"},
		{[]string{"replay"}, commands.ExitUsage, "which parked messages?"},
		{[]string{"list", "--lanes", "nope"}, commands.ExitUsage, "has no lane \"nope\""},
		{[]string{"discard", "--lanes", "9", "--all"}, commands.ExitUsage, "has no lane \"9\""},
		{[]string{"list", "--dead-letter", "nowhere.at.all"}, commands.ExitUsage, "no stream stores the dead-letter subject"},
		{[]string{"list", "--dead-letter", "dlq.*"}, commands.ExitUsage, "a literal subject"},
		{[]string{"list", "--older-than", "-1h"}, commands.ExitUsage, "positive duration"},
	} {
		code, out, errs := e.run(bad.args[0], bad.args[1:]...)
		if code != bad.code || !strings.Contains(errs, bad.says) {
			t.Errorf("%v: exit %d, want %d saying %q\n%s%s", bad.args, code, bad.code, bad.says, out, errs)
		}
	}
	if code, _, errs := lanesRun("parked", "bogus"); code != commands.ExitUsage || !strings.Contains(errs, "list, show, discard or replay") {
		t.Errorf("unknown subcommand: exit %d %s", code, errs)
	}
	code, _, errs = lanesRun("parked", "list", "--server", e.url, "--stream", "ORDERS", "--design", "nope")
	if code != commands.ExitUsage || !strings.Contains(errs, `design "nope" has no lanes`) {
		t.Errorf("unknown design: exit %d %s", code, errs)
	}
	if got := e.list().Counts.Total; got != 4 {
		t.Fatalf("bad input changed something: %d parked", got)
	}

	// discard: dry run first, then for real; a re-run finds nothing.
	code, out, _ = e.run("discard", "--key", "bob", "--dry-run")
	if code != commands.ExitChanges || !strings.Contains(out, "would discard") || e.list().Counts.Total != 4 {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if code, out, errs := e.run("discard", "--key", "bob"); code != 0 || !strings.Contains(out, "discarded") {
		t.Fatalf("discard: exit %d\n%s%s", code, out, errs)
	}
	if d := e.list(); d.Counts.Total != 3 || d.Counts.ByKey["bob"] != 0 {
		t.Fatalf("after discard: %+v", d.Counts)
	}
	if code, out, _ := e.run("discard", "--key", "bob", "--dry-run"); code != 0 || !strings.Contains(out, "0 of 0") {
		t.Fatalf("nothing left to discard: exit %d\n%s", code, out)
	}
}

// TestParkedReplayInOrder: a key's messages fail until its handler is
// fixed and are parked; after the fix, replay runs them in order, then the
// key's new ones; on a single node and a 3-node cluster.
func TestParkedReplayInOrder(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			e := newParkedEnv(t, cluster)
			e.set(e.broken, "alice", true)
			e.startWorker("one")
			seqs := e.publish("alice", 1, 3)
			e.publish("bob", 1, 2)
			e.waitParked(3, "--key", "alice")
			e.waitProcessed("bob", []int{1, 2})
			e.set(e.broken, "alice", false)

			code, out, _ := e.run("replay", "--key", "alice", "--dry-run")
			if code != commands.ExitChanges || strings.Count(out, "would replay to msgs.received_from.alice") != 3 {
				t.Fatalf("dry run: exit %d\n%s", code, out)
			}
			if got := e.processed("alice"); len(got) != 0 || e.list().Counts.Total != 3 {
				t.Fatalf("the dry run changed something: %v", got)
			}
			code, out, errs := e.run("replay", "--key", "alice", "-o", "json")
			var o actions.ParkedOutcome
			if err := json.Unmarshal([]byte(out), &o); code != 0 || err != nil || o.Changed != 3 {
				t.Fatalf("replay: exit %d %v\n%s%s", code, err, out, errs)
			}
			for i, m := range o.Messages {
				if m.OriginSeq != seqs[i] || m.NewSeq <= seqs[2] {
					t.Errorf("replayed %d: %+v (published as %v)", i, m, seqs)
				}
			}
			e.waitProcessed("alice", []int{1, 2, 3})
			e.publish("alice", 4, 4)
			e.waitProcessed("alice", []int{1, 2, 3, 4})
			e.mu.Lock()
			from := slices.Clone(e.replayed["alice"])
			e.mu.Unlock()
			if want := []string{strconv.FormatUint(seqs[0], 10), strconv.FormatUint(seqs[1], 10), strconv.FormatUint(seqs[2], 10), ""}; !slices.Equal(from, want) {
				t.Errorf("Lanes-Replayed-From-Seq seen by the handler: %q, want %q", from, want)
			}
			if got := e.list().Counts.Total; got != 0 {
				t.Errorf("%d still parked", got)
			}
		})
	}
}

// TestParkedReplayOutOfOrder: a key that moved on (a later message of it
// ran) is refused, named, with nothing changed; --out-of-order replays it.
func TestParkedReplayOutOfOrder(t *testing.T) {
	e := newParkedEnv(t, false)
	e.set(e.broken, "alice", true)
	e.startWorker("one")
	e.publish("alice", 1, 1)
	e.publish("bob", 1, 1)
	e.waitParked(1)
	e.set(e.broken, "alice", false)
	later := e.publish("alice", 2, 2)[0]
	e.waitProcessed("alice", []int{2})
	code, out, errs := e.run("replay", "--all")
	if code != commands.ExitRefused || !strings.Contains(errs, `key "alice"`) || !strings.Contains(errs, fmt.Sprintf("its message %d", later)) ||
		!strings.Contains(errs, "--out-of-order") || !strings.Contains(out, "refused: out of order") {
		t.Fatalf("moved on: exit %d\n%s%s", code, out, errs)
	}
	if code, _, _ := e.run("replay", "--all", "--dry-run"); code != commands.ExitRefused {
		t.Fatalf("dry run of a refused replay: exit %d", code)
	}
	if e.list().Counts.Total != 1 || len(e.processed("alice")) != 1 {
		t.Fatal("the refusal changed something")
	}
	if code, out, errs := e.run("replay", "--all", "--out-of-order"); code != 0 {
		t.Fatalf("--out-of-order: exit %d\n%s%s", code, out, errs)
	}
	e.waitProcessed("alice", []int{2, 1})
}

// TestParkedReplayWorkqueue: a workqueue stream deletes what was
// processed, so whether a key moved on cannot be told: replay is refused,
// saying why, and --out-of-order replays.
func TestParkedReplayWorkqueue(t *testing.T) {
	e := newParkedEnv(t, false, "--retention", "workqueue")
	e.set(e.broken, "alice", true)
	e.startWorker("one")
	e.publish("alice", 1, 2)
	e.waitParked(2)
	e.set(e.broken, "alice", false)
	code, out, errs := e.run("replay", "--key", "alice")
	if code != commands.ExitRefused || !strings.Contains(errs, "workqueue retention") || e.list().Counts.Total != 2 {
		t.Fatalf("workqueue: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := e.run("replay", "--key", "alice", "--out-of-order"); code != 0 {
		t.Fatalf("--out-of-order: exit %d\n%s%s", code, out, errs)
	}
	e.waitProcessed("alice", []int{1, 2})
}

// TestParkedReplayTwoOperators: two replays of the same key at once
// publish each parked message once, in order.
func TestParkedReplayTwoOperators(t *testing.T) {
	e := newParkedEnv(t, false)
	e.set(e.broken, "alice", true)
	e.startWorker("one")
	e.publish("alice", 1, 6)
	e.waitParked(6)
	e.set(e.broken, "alice", false)
	// Two processes (commands.Main is one per process).
	args := append(append([]string{"parked", "replay"}, e.base...), "--key", "alice")
	var wg sync.WaitGroup
	runs := make([]ran, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = runChild(t, e.url, "", 0, args...)
		}()
	}
	wg.Wait()
	for i, r := range runs {
		if r.code != 0 {
			t.Fatalf("operator %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	e.waitProcessed("alice", []int{1, 2, 3, 4, 5, 6})
	if got := e.list().Counts.Total; got != 0 {
		t.Fatalf("%d still parked", got)
	}
	e.publish("alice", 7, 7) // the handler has seen no extra copy meanwhile
	e.waitProcessed("alice", []int{1, 2, 3, 4, 5, 6, 7})
}

// TestParkedReplayKilled: replay killed -9 after a delete, and after a
// publish; a re-run finishes it, with every message processed once, in
// order.
func TestParkedReplayKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (replay killed -9, then run again)")
	}
	for _, at := range []struct {
		name, subject string
		n             int64
	}{
		{"delete", "$JS.API.STREAM.MSG.DELETE.DLQ", 2},
		{"publish", "msgs.received_from.alice", 3}, // the 3rd: a copy
	} {
		t.Run(at.name, func(t *testing.T) {
			e := newParkedEnv(t, false)
			e.set(e.broken, "alice", true)
			e.startWorker("one")
			e.publish("alice", 1, 1)
			e.waitParked(1)
			e.publish("alice", 2, 5)
			e.waitParked(5)
			e.set(e.broken, "alice", false)
			args := append(append([]string{"parked", "replay"}, e.base...), "--key", "alice")
			if c := killAtMessage(t, e.url, at.subject, at.n, args...); !c.killed {
				t.Fatalf("replay finished before it was killed: exit %d\n%s%s", c.code, c.stdout, c.stderr)
			}
			if code, out, errs := lanesRun(args...); code != 0 {
				t.Fatalf("re-run: exit %d\n%s%s", code, out, errs)
			}
			e.waitProcessed("alice", []int{1, 2, 3, 4, 5})
			if got := e.list().Counts.Total; got != 0 {
				t.Fatalf("%d still parked", got)
			}
			if code, out, _ := lanesRun(args...); code != 0 || !strings.Contains(out, "0 of 0") {
				t.Fatalf("third run: exit %d\n%s", code, out)
			}
			e.publish("alice", 6, 6)
			e.waitProcessed("alice", []int{1, 2, 3, 4, 5, 6})
		})
	}
}

// killAtMessage runs lanes ARGS in a child process (as runChild does) and
// kills it with SIGKILL once the server has carried n messages on
// subject (a wildcard, or an API request's subject).
func killAtMessage(t *testing.T, url, subject string, n int64, args ...string) ran {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	argv, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_ARGS="+string(argv))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var seen atomic.Int64
	var killed atomic.Bool
	started := make(chan struct{})
	nc.Subscribe(subject, func(*nats.Msg) {
		if seen.Add(1) == n {
			<-started
			killed.Store(true)
			cmd.Process.Kill()
		}
	})
	nc.Flush()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	close(started)
	err = cmd.Wait()
	c := ran{stdout: stdout.String(), stderr: stderr.String(), killed: killed.Load()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		c.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed at the %d-th message on %s: %v", n, subject, c.killed)
	return c
}
