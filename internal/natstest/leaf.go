package natstest

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lanes-dev/lanes/embedded"
)

// StartLeaf runs a hub with JetStream domain "hub" and a leaf node with
// its own JetStream domain "leaf" connected to it, and waits until the leaf
// connection is up: a client of the leaf reaches the hub's JetStream with
// jetstream.NewWithDomain(nc, "hub") (API requests and KV writes on
// $JS.hub.API.>).
func StartLeaf(t testing.TB) (hub, leaf *Server) {
	t.Helper()
	port := freePorts(t, 1)[0]
	hopts := embedded.Options(t.TempDir())
	hopts.ServerName, hopts.JetStreamDomain = "hub", "hub"
	hopts.LeafNode.Host, hopts.LeafNode.Port = "127.0.0.1", port
	hub = StartWith(t, hopts)
	lopts := embedded.Options(t.TempDir())
	lopts.ServerName, lopts.JetStreamDomain = "leaf", "leaf"
	u, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", port))
	lopts.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}
	leaf = StartWith(t, lopts)
	deadline := time.Now().Add(15 * time.Second)
	for leaf.NumLeafNodes() == 0 || hub.NumLeafNodes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the leaf node did not connect to the hub within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return hub, leaf
}
