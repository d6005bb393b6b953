package converge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
)

func openCluster(t *testing.T, urls string) *connect.Conn {
	t.Helper()
	c, err := connect.Open(context.Background(), connect.Options{Server: urls, Timeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestClusterApplyAndRepartition: on a 3-node cluster with a replicated
// stream and lanes, a fresh apply, a no-op re-apply with no writes, and a
// repartition under load with per-key order checked.
func TestClusterApplyAndRepartition(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	cl.WaitForJetStream()
	c := openCluster(t, cl.URLs())
	_, js := natstest.Connect(t, cl.URLs())
	d3 := design(3)
	d3.Stream.Replicas = 3
	p3 := mustPlan(t, d3)
	_, res := apply(t, c, p3, converge.Options{})
	if !res.StreamCreated || res.Created != 3 {
		t.Fatalf("fresh apply %+v", res)
	}
	for _, l := range p3.Consumers {
		info := consumerInfo(t, js, p3.Stream.Name, l.Durable)
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("%s is not replicated: %+v", l.Durable, info.Cluster)
		}
	}
	log := watchAPI(t, cl.Servers[0].ClientURL())
	log.since(t, c.NC)
	if d, res := apply(t, c, p3, converge.Options{}); d.Pending() || res.WriteRequests != 0 {
		t.Fatalf("second apply in the cluster: %+v", d.Counts())
	}
	if w := writes(log.since(t, c.NC)); len(w) != 0 {
		t.Fatalf("no-op apply wrote: %v", w)
	}

	oc := newOrderCheck(t, js, p3.Stream.Name, "orders", 20)
	oc.publish(500)
	oc.watchLanes()
	stop := oc.publishInBackground()
	d5 := design(5)
	d5.Stream.Replicas = 3
	_, res = apply(t, c, mustPlan(t, d5), converge.Options{DrainTimeout: time.Minute})
	if res.Resumed != 5 || res.Deleted != 3 {
		t.Fatalf("cluster repartition %+v", res)
	}
	stop()
	oc.waitAllProcessed(60 * time.Second)
	oc.assertInOrder()
}

// TestClusterUnavailableLaneReported: single-replica lanes on a 3-node
// cluster; the node leading some of them stops. Apply reports those lanes
// as unavailable (exit incomplete) within its deadlines, changes the
// others, and never creates a duplicate of a lane it could not see.
func TestClusterUnavailableLaneReported(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	cl.WaitForJetStream()
	d := design(8)
	d.Stream.Replicas = 3
	d.Lane.Replicas = 1
	p := mustPlan(t, d)
	apply(t, openCluster(t, cl.URLs()), p, converge.Options{})

	_, js := natstest.Connect(t, cl.URLs())
	lead := consumerInfo(t, js, p.Stream.Name, p.Consumers[0].Durable).Cluster.Leader
	var down string
	var up []string
	for _, s := range cl.Servers {
		if s.Opts.ServerName == lead {
			down = s.Opts.ServerName
			s.Stop()
		} else {
			up = append(up, s.ClientURL())
		}
	}
	if down == "" {
		t.Fatalf("leader %q not found", lead)
	}
	cl.WaitForMetaLeader()
	c := openCluster(t, strings.Join(up, ","))

	changed := d
	changed.Lane.MaxDeliver = 7
	start := time.Now()
	var diff *converge.Diff
	var res *converge.Result
	var err error
	// Right after the stop the stream may still be electing a leader: retry
	// the whole apply as an operator would, each attempt bounded.
	for attempt := 0; attempt < 5; attempt++ {
		diff, res, err = converge.Apply(context.Background(), c, mustPlan(t, changed), converge.Options{})
		var inc *converge.IncompleteError
		if errors.As(err, &inc) {
			break
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
	took := time.Since(start)
	var inc *converge.IncompleteError
	if !errors.As(err, &inc) {
		t.Fatalf("want an incomplete apply naming the unavailable lanes, got %v", err)
	}
	unavailable := diff.Unavailable()
	if len(unavailable) == 0 || len(unavailable) == 8 || res.Created != 0 {
		t.Fatalf("unavailable %v, created %d", unavailable, res.Created)
	}
	if res.Updated != 8-len(unavailable) {
		t.Fatalf("updated %d, want the %d reachable lanes", res.Updated, 8-len(unavailable))
	}
	t.Logf("node %s down: %d lanes reported unavailable in %s: %s", down, len(unavailable), took, inc.Reasons[0])
	if took > 60*time.Second {
		t.Fatalf("apply waited %s on unavailable lanes", took)
	}
}
