package natstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WaitForJetStream waits until the JetStream API answers through every
// node: right after a cluster starts, a node may know of no meta leader
// yet for a moment, and a request through it times out.
// It also waits until the meta leader can place replicas on every running
// node (it knows their JetStream stats), or an R3 stream cannot be created,
// and has kept the leadership for a moment.
func (c *Cluster) WaitForJetStream() {
	c.t.Helper()
	running := 0
	for _, s := range c.Servers {
		if s.Running() {
			running++
			waitForJetStream(c.t, s.ClientURL())
		}
	}
	c.waitLeaderSeesAll(running)
}

// waitLeaderSeesAll waits until one meta leader that sees every running
// node online has held for a moment. Right after start-up, route
// reconnections can still move the meta leadership (a request caught in
// the move times out), and a route closed and opened again marks its node
// offline at the leader until the node's next stats: an R3 stream created
// then fails with "no suitable peers for placement, peer offline".
func (c *Cluster) waitLeaderSeesAll(running int) {
	c.t.Helper()
	const settled = 750 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	leader, since := "", time.Now()
	for {
		current := ""
		for _, s := range c.Servers {
			if s.Running() && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == running {
				current = s.Opts.ServerName
			}
		}
		if current != leader {
			leader, since = current, time.Now()
		}
		if leader != "" && time.Since(since) >= settled {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no meta leader seeing the %d running nodes held for %s", running, settled)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func waitForJetStream(t testing.TB, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not answering through %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KeepAccountStreams creates a stream that stays for the whole test. The
// server removes an account's stream directory when its last stream is
// deleted, and a stream created at that moment can fail ("could not create
// storage directory"): tests that delete and create streams in turn keep one.
func KeepAccountStreams(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LANES_TEST_KEEP", Subjects: []string{"lanes_test.keep"}}); err != nil {
		t.Fatal(err)
	}
}

// placeOnAll waits until the meta leader can place a replica on every
// node. It needs each node's JetStream stats, which a leader elected late
// may not have yet: creating an R3 stream then fails with "no suitable
// peers for placement, peer offline" (seen creating apply's lock bucket
// right after StartCluster). The probe stream stays: deleting an
// account's last stream races the next create.
func (c *Cluster) placeOnAll() {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "LANES_TEST_PROBE", Subjects: []string{"lanes_test.probe"},
		Replicas: len(c.Servers), Storage: jetstream.MemoryStorage}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.CreateStream(ctx, cfg)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// The route pool's connections can still come and go after
			// the probe, each taking its node offline for a moment.
			c.waitLeaderSeesAll(len(c.Servers))
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cannot place a stream on all %d nodes: %v", len(c.Servers), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
