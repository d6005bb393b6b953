package work

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestClusterDrainsBacklog: on a 3-node cluster with replicated lanes,
// pinned and not, two instances drain a backlog with nothing published
// meanwhile, within seconds. The first instance takes every lane and gives
// half back when the second joins: a pinned lane's request left behind
// without a pin id could take the new pin and leave the lane stuck for the
// pinned TTL (2m) until the owner unpins it (failed 3 runs in 6 before).
func TestClusterDrainsBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, cl.Servers[0].URL())
	for i, tc := range []struct {
		replicas int
		pinned   bool
	}{{3, false}, {3, true}, {1, false}} {
		t.Run(fmt.Sprintf("replicas=%d,pinned=%v", tc.replicas, tc.pinned), func(t *testing.T) {
			p := testutil.Plan(t, fmt.Sprintf("cd%d", i), 4, func(d *planner.Design) {
				d.Stream.Replicas = tc.replicas
				d.Lane.Pinned = tc.pinned
			})
			natstest.CreateLanes(t, js, p)
			publishKeys(t, js, p, 16, 50)
			rec := &recorder{}
			a := startWorker(t, cl.Servers[1].URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, rec.handler("a", nil))
			startWorker(t, cl.Servers[2].URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "b"}, rec.handler("b", nil))
			deadline := time.Now().Add(10 * time.Second) // a stuck pin would last its 2m TTL
			for len(rec.seqs()) != 800 {
				if time.Now().After(deadline) {
					for _, l := range p.Lanes {
						c, err := js.Consumer(context.Background(), p.Stream.Name, l.Name)
						if err != nil {
							t.Logf("%s: %v", l.Name, err)
							continue
						}
						ci := c.CachedInfo()
						b, _ := json.Marshal(ci.PriorityGroups)
						t.Logf("%s: pending %d ack pending %d waiting %d groups %s leader %s", l.Name, ci.NumPending, ci.NumAckPending, ci.NumWaiting, b, ci.Cluster.Leader)
					}
					t.Fatalf("%d of 800 processed", len(rec.seqs()))
				}
				time.Sleep(50 * time.Millisecond)
			}
			checkOrder(t, rec.snapshot(), false)
			// Acks wait for the server's answer on replicated lanes only
			// (a leader change can lose an applied ack there).
			a.w.mu.Lock()
			for name, l := range a.w.lanes {
				if l.replicated != (tc.replicas > 1) {
					t.Errorf("%s: replicated %v with %d replicas", name, l.replicated, tc.replicas)
				}
			}
			a.w.mu.Unlock()
		})
	}
}
