package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/work"
)

// startQuarantineWorker runs a lanes work instance with policy (parking on
// dlq.orders after 2 attempts unless deadLetter is false) in this process;
// the returned stop ends it (the test's end does too).
func (e *parkedEnv) startQuarantineWorker(instance string, policy work.Policy) (stop func()) {
	e.t.Helper()
	nc, err := nats.Connect(e.url, nats.MaxReconnects(-1))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	cfg := work.Config{Stream: e.plan.Stream.Name, Design: e.plan.Design.Name, Instance: instance,
		OnPoison: policy, DeadLetter: "dlq.orders", ParkAfter: 2}
	w, err := work.New(js, cfg, work.HandlerFunc(e.handle))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx); close(stopped) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				e.t.Errorf("worker %s did not stop", instance)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// neighbour is a key other than key on key's lane.
func (e *parkedEnv) neighbour(key string) string {
	e.t.Helper()
	subj, _ := e.plan.SubjectForKey(key)
	own, _ := e.plan.LaneOf(subj)
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("n%d", i)
		s, _ := e.plan.SubjectForKey(k)
		if l, ok := e.plan.LaneOf(s); ok && l.Partition == own.Partition {
			return k
		}
	}
	e.t.Fatal("no other key on the lane")
	return ""
}

// quarantineDoc is the part of inspect -o json about quarantined keys.
type quarantineDoc struct {
	Workers []struct {
		Design      string `json:"design"`
		Quarantined []struct {
			Key   string `json:"key"`
			Lane  string `json:"lane"`
			Seq   uint64 `json:"seq"`
			Error string `json:"error"`
			State string `json:"state"`
		} `json:"quarantined"`
	} `json:"workers"`
	Findings []struct {
		Code, Lane, Message, Advice string
	} `json:"findings"`
}

func (e *parkedEnv) inspectQuarantine() quarantineDoc {
	e.t.Helper()
	code, out, errs := lanesRun(append([]string{"inspect", "-o", "json"}, e.base...)...)
	if code > 1 { // 1: findings at the threshold
		e.t.Fatalf("inspect: exit %d\n%s%s", code, out, errs)
	}
	var d quarantineDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		e.t.Fatalf("%v\n%s", err, out)
	}
	return d
}

// replayDoc is lanes parked replay -o json's account of a quarantine.
type replayDoc struct {
	Changed     int `json:"changed"`
	Quarantines []struct {
		Key      string `json:"key"`
		Rounds   int    `json:"rounds"`
		Replayed int    `json:"replayed"`
		Result   string `json:"result"`
	} `json:"quarantines"`
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// duringReplay publishes key's messages from..to as soon as the replay's
// first copy of key is published (a copy carries Lanes-Replay-Id): they
// arrive during the replay. The returned wait says when they are out.
func (e *parkedEnv) duringReplay(key string, from, to int) (wait func()) {
	e.t.Helper()
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	var once sync.Once
	_, err = nc.Subscribe("msgs.received_from."+key, func(m *nats.Msg) {
		if m.Header.Get(work.HeaderReplayID) == "" {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				e.publish(key, from, to)
			}()
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	nc.Flush()
	return func() {
		e.t.Helper()
		select {
		case <-done:
		case <-time.After(time.Minute):
			e.t.Fatal("no replayed copy was seen")
		}
		nc.Close()
	}
}

// TestQuarantineStopsOneKeyThenReplayLifts: under --on-poison quarantine a
// key whose message fails twice is quarantined: that message and every
// later one of the key are parked unrun, in order, while another key of
// the same lane goes on; a second instance started later (policy block)
// honours the record; inspect lists the key with its first failure and a
// finding. After the fix, lanes parked replay --key replays the parked
// messages in order, then lifts the quarantine: the messages published
// during the replay run after every replayed one, and new messages after
// them. Serial and key-parallel lanes, single node and a 3-node cluster.
func TestQuarantineStopsOneKeyThenReplayLifts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers, quarantine and replay")
	}
	for _, tc := range []struct {
		name    string
		cluster bool
		apply   []string
	}{
		{"single node, serial", false, nil},
		{"single node, key-parallel", false, []string{"--keys-in-flight", "4"}},
		{"3-node cluster, serial", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newParkedEnv(t, tc.cluster, tc.apply...)
			other := e.neighbour("alice")
			e.set(e.broken, "alice", true)
			stopOne := e.startQuarantineWorker("one", work.Quarantine)
			first := e.publish("alice", 1, 1)[0]
			e.publish(other, 1, 3)
			e.publish("alice", 2, 5)
			e.publish(other, 4, 6)
			e.waitParked(5)
			e.waitProcessed(other, span(1, 6))
			if got := e.processed("alice"); len(got) != 0 {
				t.Fatalf("alice ran %v while quarantined", got)
			}
			d := e.list("--key", "alice")
			for i, m := range d.Messages {
				want := fmt.Sprintf("key quarantined since seq %d", first)
				if i == 0 {
					want = "quarantined: failed 2 time(s)"
				}
				if m.Reason != want || m.Key != "alice" {
					t.Errorf("parked %d: %+v, want reason %q", i, m, want)
				}
				if i > 0 && m.OriginSeq <= d.Messages[i-1].OriginSeq {
					t.Errorf("parked out of order: %+v", d.Messages)
				}
			}

			doc := e.inspectQuarantine()
			if len(doc.Workers) != 1 || len(doc.Workers[0].Quarantined) != 1 || doc.Workers[0].Quarantined[0].Key != "alice" ||
				doc.Workers[0].Quarantined[0].Seq != first || !strings.Contains(doc.Workers[0].Quarantined[0].Error, "cannot process alice") {
				t.Fatalf("inspect: %+v", doc.Workers)
			}
			found := false
			for _, f := range doc.Findings {
				if f.Code == "quarantined" {
					found = strings.Contains(f.Advice, "lanes parked replay --key alice") && strings.Contains(f.Message, fmt.Sprint(first))
				}
			}
			if !found {
				t.Fatalf("no quarantined finding with its advice: %+v", doc.Findings)
			}
			_, text, _ := lanesRun(append([]string{"inspect"}, e.base...)...)
			if !strings.Contains(text, "quarantined") || !strings.Contains(text, "alice") {
				t.Errorf("inspect's table does not list the key:\n%s", text)
			}

			// A second instance, started after the quarantine, with its own
			// policy block, takes the lanes and honours it.
			e.startQuarantineWorker("two", work.Block)
			stopOne()
			e.publish("alice", 6, 6)
			e.publish(other, 7, 7)
			e.waitParked(6)
			e.waitProcessed(other, span(1, 7))
			if got := e.processed("alice"); len(got) != 0 {
				t.Fatalf("alice ran %v while quarantined", got)
			}

			// A dry run changes nothing (exit 3).
			if code, out, errs := e.run("replay", "--key", "alice", "--dry-run"); code != 3 || !strings.Contains(out, "alice") {
				t.Fatalf("dry run: exit %d\n%s%s", code, out, errs)
			}
			if n := len(e.inspectQuarantine().Workers[0].Quarantined); n != 1 {
				t.Fatalf("the dry run lifted the quarantine")
			}

			e.set(e.broken, "alice", false)
			waitDuring := e.duringReplay("alice", 7, 9)
			code, out, errs := e.run("replay", "--key", "alice", "-o", "json")
			if code != 0 {
				t.Fatalf("replay: exit %d\n%s%s", code, out, errs)
			}
			waitDuring()
			var rd replayDoc
			if err := json.Unmarshal([]byte(out), &rd); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if len(rd.Quarantines) != 1 || rd.Quarantines[0].Result != "lifted" || rd.Quarantines[0].Replayed < 6 {
				t.Fatalf("replay: %s", out)
			}
			t.Logf("replayed in %d round(s), %d message(s)", rd.Quarantines[0].Rounds, rd.Quarantines[0].Replayed)
			e.publish("alice", 10, 11)
			e.waitProcessed("alice", span(1, 11))
			if n := e.list().Counts.Total; n != 0 {
				t.Fatalf("%d still parked", n)
			}
			if q := e.inspectQuarantine().Workers[0].Quarantined; len(q) != 0 {
				t.Fatalf("still quarantined: %+v", q)
			}
			e.waitProcessed(other, span(1, 7))
		})
	}
}

// TestQuarantineReplayKilled: a replay killed -9 midway (after its first
// deletes, or once it has written a state) leaves the record saying how
// far it got; a re-run finishes, lifts, and the key runs in order.
func TestQuarantineReplayKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test")
	}
	for _, at := range []struct {
		name, subject string
		n             int64
	}{
		{"after two deletes", "$JS.API.STREAM.MSG.DELETE.DLQ", 2},
		{"at the lifting state", "$KV.lanes_work.ORDERS.orders.q.>", 2}, // replaying, then lifting
	} {
		t.Run(at.name, func(t *testing.T) {
			e := newParkedEnv(t, false)
			e.set(e.broken, "alice", true)
			e.startQuarantineWorker("one", work.Quarantine)
			e.publish("alice", 1, 5)
			e.waitParked(5)
			e.set(e.broken, "alice", false)
			args := append(append([]string{"parked", "replay"}, e.base...), "--key", "alice")
			c := killAtMessage(t, e.url, at.subject, at.n, args...)
			if !c.killed {
				t.Logf("replay finished before it was killed: exit %d\n%s%s", c.code, c.stdout, c.stderr)
			}
			if code, out, errs := lanesRun(args...); code != 0 {
				t.Fatalf("re-run: exit %d\n%s%s", code, out, errs)
			}
			e.publish("alice", 6, 7)
			e.waitProcessed("alice", span(1, 7))
			if q := e.inspectQuarantine().Workers[0].Quarantined; len(q) != 0 {
				t.Fatalf("still quarantined: %+v", q)
			}
		})
	}
}

// TestQuarantineTwoOperators: two replays of the same quarantined key at
// once: each message runs once, in order, and the key is lifted.
func TestQuarantineTwoOperators(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers and replays")
	}
	e := newParkedEnv(t, false)
	e.set(e.broken, "alice", true)
	e.startQuarantineWorker("one", work.Quarantine)
	e.publish("alice", 1, 5)
	e.waitParked(5)
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
		// One lifts; the other finds it lifted, or lifted by the first
		// while it ran: never a failure.
		if r.code != 0 {
			t.Errorf("operator %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	if got := e.list().Counts.Total; got != 0 {
		t.Fatalf("%d still parked", got)
	}
	e.publish("alice", 6, 6)
	e.waitProcessed("alice", span(1, 6))
}

// TestQuarantineFailsAgain: a replayed message that fails again leaves the
// key quarantined (exit 4), its messages parked in order, also on an
// instance whose own policy is park; a replay after the real fix runs them
// all in order.
func TestQuarantineFailsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: workers and replays")
	}
	e := newParkedEnv(t, false)
	e.set(e.broken, "alice", true)
	stopOne := e.startQuarantineWorker("one", work.Quarantine)
	e.publish("alice", 1, 3)
	e.waitParked(3)
	e.startQuarantineWorker("two", work.Park) // serves the lanes from now on
	stopOne()
	code, out, errs := e.run("replay", "--key", "alice")
	if code != 4 || !strings.Contains(out+errs, "failed again") {
		t.Fatalf("replay of a still broken key: exit %d\n%s%s", code, out, errs)
	}
	if q := e.inspectQuarantine().Workers[0].Quarantined; len(q) != 1 || q[0].State != "quarantined" {
		t.Fatalf("not quarantined: %+v", q)
	}
	e.waitParked(3)
	if got := e.processed("alice"); len(got) != 0 {
		t.Fatalf("alice ran %v", got)
	}
	e.set(e.broken, "alice", false)
	if code, out, errs := e.run("replay", "--key", "alice"); code != 0 {
		t.Fatalf("replay after the fix: exit %d\n%s%s", code, out, errs)
	}
	e.waitProcessed("alice", span(1, 3))
}

// TestQuarantineBadInput: quarantine without a dead-letter subject, or an
// unknown policy, is refused naming the flag (exit 2).
func TestQuarantineBadInput(t *testing.T) {
	cleanEnv(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--on-poison", "quarantine"}, []string{"--on-poison", "quarantine needs a dead-letter subject"}},
		{[]string{"--on-poison", "quarantined", "--dead-letter", "dlq.x"}, []string{"--on-poison", "block, park or quarantine"}},
	} {
		args := append([]string{"work", "--server", "nats://127.0.0.1:1", "--stream", "ORDERS", "--exec", "true"}, tc.args...)
		code, out, errs := lanesRun(args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s%s", tc.args, code, out, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr does not say %q:\n%s", tc.args, w, errs)
			}
		}
	}
}
