package health_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestClusterNamesUnavailableLanes: on a 3-node cluster with an R3 stream
// and R1 lanes, stopping a node that leads some lanes makes them missing:
// the report names them (as rows and critical findings) instead of waiting,
// and does not mistake them for gaps.
func TestClusterNamesUnavailableLanes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	p := testutil.Plan(t, "clustered", 6, func(d *planner.Design) {
		d.Stream.Replicas = 3
		d.Lane.Replicas = 1
	})
	natstest.CreateLanes(t, js, p)
	conn, err := connect.Open(context.Background(), connect.Options{Server: c.URLs(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func() *health.Report {
		t.Helper()
		r, err := health.Inspect(context.Background(), conn, health.Options{Stream: p.Stream.Name})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before := read()
	led := map[string][]string{}
	for _, l := range before.Lanes {
		if l.Leader == "" {
			t.Fatalf("lane %s reports no cluster leader", l.Name)
		}
		led[l.Leader] = append(led[l.Leader], l.Name)
	}
	// Stop a node that leads lanes, preferring one that is not the meta
	// leader so the cluster keeps answering at once.
	var victim *natstest.Server
	for _, s := range c.Servers {
		if len(led[s.Opts.ServerName]) > 0 && (victim == nil || victim.JetStreamIsLeader()) {
			victim = s
		}
	}
	gone := led[victim.Opts.ServerName]
	victim.Stop()
	c.WaitForMetaLeader()

	start := time.Now()
	var after *health.Report
	for deadline := time.Now().Add(45 * time.Second); ; {
		// Right after the stop, the stream's own leader may be moving: a
		// read can time out then. Only the settled answer is judged.
		r, err := health.Inspect(context.Background(), conn, health.Options{Stream: p.Stream.Name})
		if err == nil {
			after = r
		}
		if (after != nil && after.Summary.Unavailable == len(gone)) || time.Now().After(deadline) {
			if after == nil {
				t.Fatalf("no read succeeded after stopping %s: %v", victim.Opts.ServerName, err)
			}
			break
		}
		time.Sleep(500 * time.Millisecond) // the cluster may still be noticing the node is gone
	}
	t.Logf("stopped %s (leader of %v); read took %s; findings:\n%s", victim.Opts.ServerName, gone, time.Since(start), findingsText(after))
	if len(after.Lanes) != 6 {
		t.Fatalf("all 6 lanes should be rows, got %d:\n%s", len(after.Lanes), findingsText(after))
	}
	for _, name := range gone {
		l := after.Lane(name)
		if l == nil || l.State == health.StateOK {
			t.Fatalf("lane %s on the stopped node should be missing or offline: %+v", name, l)
		}
		if l.Partition < 0 || l.Design != "clustered" {
			t.Fatalf("lane %s: partition and design come from its name: %+v", name, l)
		}
		if f := find(after, string(l.State), name); f == nil || f.Severity != health.Critical {
			t.Fatalf("no critical %s finding for %s:\n%s", l.State, name, findingsText(after))
		}
	}
	if f := find(after, "gap", ""); f != nil {
		t.Fatalf("unavailable lanes are not gaps: %s", f.Message)
	}
	if after.Summary.Lanes != 6-len(gone) {
		t.Fatalf("summary counts %d answering lanes, want %d", after.Summary.Lanes, 6-len(gone))
	}
}
