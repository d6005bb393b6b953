package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

func diffPlan(t *testing.T, n int, mut ...func(*planner.Design)) *planner.Plan {
	t.Helper()
	d := planner.Design{Name: "orders", Subject: "msgs.received_from.*", Partitions: n}
	for _, m := range mut {
		m(&d)
	}
	p := testutil.PlanDesign(t, d)
	return p
}

// liveOf is a server holding p's stream and lanes as planned.
func liveOf(t *testing.T, p *planner.Plan, backlog uint64) *converge.Live {
	t.Helper()
	live := &converge.Live{Stream: &converge.LiveStream{Config: p.Stream}, Consumers: jsapi.Empty()}
	for _, c := range p.Consumers {
		var cfg jetstream.ConsumerConfig
		b, _ := json.Marshal(c)
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		live.Consumers.Consumers = append(live.Consumers.Consumers, &jetstream.ConsumerInfo{Name: c.Durable, Config: cfg, NumPending: backlog})
	}
	return live
}

func withLastSeq(l *converge.Live, seq uint64) *converge.Live {
	l.Stream.LastSeq = seq
	return l
}

func TestDiffTableGolden(t *testing.T) {
	p8 := diffPlan(t, 8)
	slower := diffPlan(t, 8, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(time.Minute); d.Lane.MaxWaiting = 64 })
	acct := diffPlan(t, 8, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
	keyed := diffPlan(t, 8, func(d *planner.Design) { d.Lane.KeysInFlight = 8 })
	oldServer := liveOf(t, p8, 0)
	oldServer.Topology = converge.Topology{Servers: 1, Version: "2.10.9"}
	cases := []struct {
		name string
		plan *planner.Plan
		live *converge.Live
		opts converge.Options
	}{
		{"fresh", p8, &converge.Live{Consumers: jsapi.Empty()}, converge.Options{}},
		{"noop", p8, liveOf(t, p8, 0), converge.Options{}},
		{"refused", slower, liveOf(t, p8, 0), converge.Options{}},
		{"recreate", slower, liveOf(t, p8, 0), converge.Options{Recreate: true}},
		{"repartition", diffPlan(t, 12), withLastSeq(liveOf(t, p8, 25), 200), converge.Options{}},
		{"account", acct, &converge.Live{Consumers: jsapi.Empty()}, converge.Options{}},
		{"keys", keyed, liveOf(t, p8, 0), converge.Options{}},
		{"keys_back", p8, liveOf(t, keyed, 0), converge.Options{}},
		{"keys_old_server", keyed, oldServer, converge.Options{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			d := converge.Compute(c.plan, c.live, c.opts)
			if err := DiffTable(&b, PlainStyles(), "nats://127.0.0.1:4222", d); err != nil {
				t.Fatal(err)
			}
			golden(t, "diff_"+c.name, b.Bytes())
		})
	}
}

// TestApplyDocJSON pins the JSON field names scripts depend on.
func TestApplyDocJSON(t *testing.T) {
	p := diffPlan(t, 2, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(time.Minute) })
	d := converge.Compute(p, liveOf(t, diffPlan(t, 2), 0), converge.Options{})
	var b bytes.Buffer
	if err := JSON(&b, ApplyDoc{Server: "nats://x:4222", DryRun: true, Status: "pending", Pending: d.Pending(), NeedsConfirmation: true, Diff: d}); err != nil {
		t.Fatal(err)
	}
	golden(t, "diff_doc_json", b.Bytes())
}

// TestDiffFoldsOnlyConsecutiveLanes: lanes with the same change fold into
// one row only when they are consecutive; a lane as designed in between
// splits the run.
func TestDiffFoldsOnlyConsecutiveLanes(t *testing.T) {
	p8 := diffPlan(t, 8)
	slower := diffPlan(t, 8, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(time.Minute) })
	live := liveOf(t, p8, 0)
	for _, i := range []int{3, 4, 6, 7} { // as designed already
		live.Consumers.Consumers[i].Config.AckWait = time.Minute
	}
	var b bytes.Buffer
	if err := DiffTable(&b, PlainStyles(), "nats://127.0.0.1:4222", converge.Compute(slower, live, converge.Options{})); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "orders-n8-00 .. orders-n8-02 (3)") || !strings.Contains(out, "orders-n8-05 ") || strings.Contains(out, "(4)") {
		t.Fatalf("rows must fold consecutive lanes only:\n%s", out)
	}
}

// TestDiffEscapesServerText: a lane found by its tags keeps its name,
// whatever it is; the diff shows escape sequences escaped, never raw.
func TestDiffEscapesServerText(t *testing.T) {
	p2 := diffPlan(t, 2)
	live := liveOf(t, p2, 0)
	live.Consumers.Consumers[0].Name = "orders-\x1b[2J\x1b]0;owned\x07"
	var b bytes.Buffer
	if err := DiffTable(&b, PlainStyles(), "nats://127.0.0.1:4222", converge.Compute(diffPlan(t, 2, func(d *planner.Design) { d.Lane.AckWait = planner.Duration(time.Minute) }), live, converge.Options{})); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `orders-\x1b[2J`) {
		t.Fatalf("raw escape sequences in the diff:\n%q", out)
	}
}
