package jsapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// TestListAccountsForEveryConsumerWithANodeDown: with more consumers than a
// page holds and some of them on a stopped node, every consumer is either
// listed or named missing/offline, once. (The server reports a consumer
// whose peers are all offline both as a nameless info and as missing.)
func TestListAccountsForEveryConsumerWithANodeDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := natstest.StartCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	p, err := planner.New(planner.Design{Name: "paged", Subject: "paged.received_from.*", Partitions: 600,
		Stream: planner.StreamSettings{Replicas: 3}, Lane: planner.LaneSettings{Replicas: 1}})
	if err != nil {
		t.Fatal(err)
	}
	natstest.CreateLanes(t, js, p)
	conn, err := connect.Open(context.Background(), connect.Options{Server: c.URLs(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	victim := c.Servers[0]
	if victim.JetStreamIsLeader() {
		victim = c.Servers[1]
	}
	victim.Stop()
	c.WaitForMetaLeader()
	var l *jsapi.Listing
	api := jsapi.New(conn)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if l, err = api.List(context.Background(), p.Stream.Name); err == nil && len(l.Missing)+len(l.Offline) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no consumer reported missing after stopping a node (err %v)", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	names := map[string]int{}
	for _, ci := range l.Consumers {
		if ci.Name == "" {
			t.Fatal("a nameless placeholder info was kept")
		}
		names[ci.Name]++
	}
	for _, n := range l.Missing {
		names[n]++
	}
	for n := range l.Offline {
		if !contains(l.Missing, n) {
			names[n]++
		}
	}
	for _, lane := range p.Lanes {
		if names[lane.Name] != 1 {
			t.Fatalf("lane %s accounted %d times (listed %d, missing %d, offline %d)", lane.Name, names[lane.Name],
				len(l.Consumers), len(l.Missing), len(l.Offline))
		}
	}
	if l.Requests != 3 {
		t.Fatalf("600 consumers take 3 pages, took %d requests", l.Requests)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
