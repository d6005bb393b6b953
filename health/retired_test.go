package health_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/planner"
)

// drainAll acks messages of the stream's lanes until n were acked. (It
// counts, rather than waiting for no pending: num_pending is updated
// asynchronously after a publish, so "nothing pending" can be seen before
// the last publishes are.)
func drainAll(t *testing.T, js jetstream.JetStream, stream string, n int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	acked := 0
	for acked < n {
		if time.Now().After(deadline) {
			t.Fatalf("the lanes did not drain: %d of %d acked", acked, n)
		}
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			if ci.NumPending+uint64(ci.NumAckPending) == 0 || ci.Paused {
				continue
			}
			c, err := js.Consumer(ctx, stream, ci.Name)
			if err != nil {
				continue
			}
			b, err := c.Fetch(100, jetstream.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				continue
			}
			for m := range b.Messages() {
				if m.DoubleAck(ctx) == nil {
					acked++
				}
			}
		}
	}
}

// TestFinishedRepartitionLeavesOnlyInfo: after 4 -> 6, the n4 messages are
// still stored (limits retention) but every one was processed before apply
// deleted the n4 lanes. inspect reports them as retired (info) with purge
// advice bounded by the retirement sequence, never advice to republish, and
// --fail-on 'severity>=warning' passes.
func TestFinishedRepartitionLeavesOnlyInfo(t *testing.T) {
	t.Parallel()
	for _, mapping := range []string{planner.MappingStream, planner.MappingAccount} {
		t.Run(mapping, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			d4 := planner.Design{Name: "orders", Subject: "msgs.received_from.*", Partitions: 4, Mapping: mapping}
			p4, _ := planner.New(d4)
			d6 := d4
			d6.Partitions = 6
			p6, _ := planner.New(d6)
			acc := e.srv.GlobalAccount()
			if mapping == planner.MappingAccount {
				acc.AddMapping(p4.Mapping.Source, p4.Mapping.Destination)
			}
			if _, _, err := converge.Apply(ctx, e.conn, p4, converge.Options{}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 40; i++ {
				if _, err := e.js.Publish(ctx, fmt.Sprintf("msgs.received_from.u%d", i), nil); err != nil {
					t.Fatal(err)
				}
			}
			drainAll(t, e.js, p4.Stream.Name, 40)
			if mapping == planner.MappingAccount {
				converge.Apply(ctx, e.conn, p6, converge.Options{}) // held lanes, exit 5
				acc.AddMapping(p6.Mapping.Source, p6.Mapping.Destination)
			}
			if _, _, err := converge.Apply(ctx, e.conn, p6, converge.Options{MappingSwitched: true, DrainTimeout: time.Minute}); err != nil {
				t.Fatal(err)
			}

			for _, opts := range []func(*health.Options){func(o *health.Options) {}, func(o *health.Options) { o.Plan = p6 }} {
				_, r := e.read(p6.Stream.Name, opts)
				if f := find(r, "unpartitioned", ""); f != nil {
					t.Fatalf("messages the retired lanes processed reported as unpartitioned:\n%s", findingsText(r))
				}
				for _, f := range r.Findings {
					if f.Severity >= health.Warning {
						t.Fatalf("a finished repartition must leave no warning:\n%s", findingsText(r))
					}
				}
				f := mustFind(t, r, "retired", "", health.Info)
				if !strings.Contains(f.Message, "40 message") || !strings.Contains(f.Advice, "--seq") || !strings.Contains(f.Advice, "n4.*.*") || strings.Contains(f.Advice, "republish") {
					t.Fatalf("retired finding: %+v", f)
				}
				if strings.Contains(f.Message, "processed by nobody") || strings.Contains(f.Message, "stored after") {
					t.Fatalf("no message was stored after the retirement, yet the finding says one was lost: %s", f.Message)
				}
			}
			// The design file still says 4 (the worker example in
			// docs/work.md changes the count on the command line): the
			// mapping in force is the stream's, or with an account mapping
			// the one the lanes are on. No gap, nothing critical; the drift
			// is a warning.
			_, r := e.read(p6.Stream.Name, func(o *health.Options) { o.Plan = p4 })
			for _, f := range r.Findings {
				if f.Severity == health.Critical {
					t.Fatalf("a design file older than the server judged as a critical fault:\n%s", findingsText(r))
				}
			}
			if f := mustFind(t, r, "mapping_drift", "", health.Warning); !strings.Contains(f.Message, "(6 partitions)") {
				t.Fatalf("drift: %+v", f)
			}
			if mapping != planner.MappingAccount {
				return
			}
			// A message stored under n4 after the retirement (a server still
			// mapping to n4, or a publish around the mapping) was processed by
			// nobody: the purge the advice gives cannot remove it.
			ack, err := e.js.Publish(ctx, "msgs.received_from.n4.0.straggler", nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.js.Stream(ctx, p6.Stream.Name)
			if err != nil {
				t.Fatal(err)
			}
			rec := planner.Generations(s.CachedInfo().Config.Metadata)["orders"][4]
			if !rec.Retired() || rec.Subjects != "msgs.received_from.n4.*.*" {
				t.Fatalf("generation record %+v", rec)
			}
			// inspect finds it (one lookup after the retirement sequence)
			// and says it was processed by nobody: a warning.
			_, r = e.read(p6.Stream.Name)
			f := mustFind(t, r, "retired", "", health.Warning)
			if want := fmt.Sprintf("the first at seq %d (msgs.received_from.n4.0.straggler)", ack.Sequence); !strings.Contains(f.Message, want) || !strings.Contains(f.Message, "processed by nobody") {
				t.Fatalf("retired finding with a straggler, want %q: %s", want, f.Message)
			}
			if err := s.Purge(ctx, jetstream.WithPurgeSubject(rec.Subjects), jetstream.WithPurgeSequence(rec.RetiredSeq+1)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GetLastMsgForSubject(ctx, "msgs.received_from.n4.0.straggler"); err != nil {
				t.Fatalf("the advised purge removed a message stored after the retirement: %v", err)
			}
			if m, err := s.GetLastMsgForSubject(ctx, "msgs.received_from.n4.>"); err != nil || m.Sequence <= rec.RetiredSeq {
				t.Fatalf("only the straggler is left under n4: %v %+v", err, m)
			}
		})
	}
}
