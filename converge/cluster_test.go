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
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
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
// repartition: refused while it would switch a replicated stream's
// transform (see replicatedSwitchRisk), done with --force once the
// publisher stopped, with workers running and per-key order checked.
func TestClusterApplyAndRepartition(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	c := openCluster(t, cl.URLs())
	_, js := natstest.Connect(t, cl.URLs())
	d3 := testutil.Seed(3)
	d3.Stream.Replicas = 3
	p3 := testutil.PlanDesign(t, d3)
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
	d5 := testutil.Seed(5)
	d5.Stream.Replicas = 3
	p5 := testutil.PlanDesign(t, d5)
	_, _, err := converge.Apply(context.Background(), c, p5, converge.Options{})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "3 replicas") {
		t.Fatalf("a replicated stream's switch under load must be refused: %v", err)
	}
	stop() // the operator stops the publishers for the switch
	_, res = apply(t, c, p5, converge.Options{Force: true, DrainTimeout: time.Minute})
	if res.Resumed != 5 || res.Deleted != 3 || len(res.Warnings) != 0 {
		t.Fatalf("cluster repartition %+v", res)
	}
	stop = oc.publishInBackground() // and starts them again
	from := oc.processed()
	testutil.WaitFor(t, "new lanes to process new messages", 30*time.Second, func() bool { return oc.processed() > from+200 })
	stop()
	oc.waitAllProcessed(60 * time.Second)
	oc.assertInOrder()
}

// TestClusterAccountRepartitionUnderLoad: with the mapping in the account
// (applied where a message enters, before the stream), a replicated
// stream repartitions while publishers keep publishing, order intact.
func TestClusterAccountRepartitionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster under load")
	}
	cl := natstest.StartCluster(t, 3)
	c := openCluster(t, cl.URLs())
	_, js := natstest.Connect(t, cl.URLs())
	account := func(n int) *planner.Plan {
		d := testutil.Seed(n)
		d.Stream.Replicas = 3
		d.Mapping = planner.MappingAccount
		return testutil.PlanDesign(t, d)
	}
	install := func(p *planner.Plan) { // the operator's step, on every server
		for _, s := range cl.Servers {
			if err := s.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
				t.Fatal(err)
			}
		}
	}
	p3, p5 := account(3), account(5)
	install(p3)
	apply(t, c, p3, converge.Options{})
	oc := newOrderCheck(t, js, p3.Stream.Name, "orders", 20)
	oc.publish(300)
	oc.watchLanes()
	stop := oc.publishInBackground()
	_, _, err := converge.Apply(context.Background(), c, p5, converge.Options{})
	var inc *converge.IncompleteError
	if !errors.As(err, &inc) {
		t.Fatalf("first step: %v", err)
	}
	install(p5)
	_, res := apply(t, c, p5, converge.Options{MappingSwitched: true, DrainTimeout: time.Minute})
	if res.Resumed != 5 || res.Deleted != 3 {
		t.Fatalf("second step: %+v", res)
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
	if testing.Short() {
		t.Skip("-short: a 3-node cluster losing a node")
	}
	cl := natstest.StartCluster(t, 3)
	d := testutil.Seed(8)
	d.Stream.Replicas = 3
	d.Lane.Replicas = 1
	p := testutil.PlanDesign(t, d)
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
		diff, res, err = converge.Apply(context.Background(), c, testutil.PlanDesign(t, changed), converge.Options{})
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

// TestClusterRecreateOfALaneThatAckedNothing: in a cluster, a consumer
// created at a start sequence reports ack floor 0 until its first ack (a
// single server reports start - 1). A new generation's lane that acked
// nothing yet must be recreated at its start, not at sequence 1: that
// would deliver every message its subjects ever held again.
func TestClusterRecreateOfALaneThatAckedNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	c := openCluster(t, cl.URLs())
	_, js := natstest.Connect(t, cl.URLs())
	d := testutil.Seed(2)
	d.Stream.Replicas = 3
	apply(t, c, testutil.PlanDesign(t, d), converge.Options{})
	oc := newOrderCheck(t, js, "ORDERS", "orders", 10)
	oc.publish(40) // stored under n2, processed below
	oc.watchLanes()
	oc.waitAllProcessed(30 * time.Second)

	d.Partitions = 3
	apply(t, c, testutil.PlanDesign(t, d), converge.Options{Force: true, DrainTimeout: time.Minute}) // no publisher runs: --force
	lane := testutil.PlanDesign(t, d).Consumers[0].Durable
	start := consumerInfo(t, js, "ORDERS", lane).Config.OptStartSeq
	if start < 41 {
		t.Fatalf("the n3 lanes start at %d, want after the 40 n2 messages", start)
	}
	d.Lane.MaxWaiting = 64
	_, res := apply(t, c, testutil.PlanDesign(t, d), converge.Options{Recreate: true})
	for _, r := range res.Recreated {
		if r.Position.StartSeq < start {
			t.Fatalf("%s recreated at %d, before its start %d: it would deliver old messages again", r.Lane, r.Position.StartSeq, start)
		}
	}
	oc.publish(30)
	oc.waitAllProcessed(30 * time.Second)
	oc.assertInOrder()
}
