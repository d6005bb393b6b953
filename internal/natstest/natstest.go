// Package natstest starts real nats-servers inside tests: a single
// JetStream node or a 3-node cluster on loopback. No fakes.
package natstest

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/embedded"
)

// Server is a test server; it is stopped when the test ends.
type Server struct {
	*embedded.Server
	Opts *server.Options
	t    testing.TB
}

// Start runs a single JetStream server. configure may change the options
// (auth, TLS, accounts) before it starts.
func Start(t testing.TB, configure ...func(*server.Options)) *Server {
	t.Helper()
	opts := embedded.Options(t.TempDir())
	opts.ServerName = "test"
	for _, c := range configure {
		c(opts)
	}
	return StartWith(t, opts)
}

// StartWith runs a server with exactly these options.
func StartWith(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	s, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	ts := &Server{Server: s, Opts: opts, t: t}
	attachLog(t, ts)
	return ts
}

// Restart stops the server and starts it again on the same port and store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Down()()
}

// Down stops the server; up starts it again on the same port and store.
func (s *Server) Down() (up func()) {
	s.t.Helper()
	port := s.Server.Addr().(*net.TCPAddr).Port // unknown once stopped
	s.Stop()
	return func() {
		s.t.Helper()
		opts := s.Opts.Clone()
		opts.Port = port
		ns, err := embedded.Start(opts)
		if err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(ns.Stop)
		s.Server = ns
	}
}

// URL is the client URL.
func (s *Server) URL() string { return s.ClientURL() }

// Connect opens a client connection closed at the end of the test.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Cluster is a 3-node JetStream cluster on loopback.
type Cluster struct {
	Servers []*Server
	t       testing.TB
	relays  [][]*Relay // relays[i][j] carries node i's route to node j
}

// StartCluster runs n JetStream servers routed to each other and waits
// until JetStream answers through every node and the meta leader can place
// replicas on all of them.
func StartCluster(t testing.TB, n int) *Cluster { return startCluster(t, n, false) }

// StartRelayedCluster is StartCluster with every route through a Relay,
// so that Hang can make a node stop answering without leaving.
func StartRelayedCluster(t testing.TB, n int) *Cluster { return startCluster(t, n, true) }

func startCluster(t testing.TB, n int, relayed bool) *Cluster {
	t.Helper()
	ports := freePorts(t, n)
	c := &Cluster{t: t}
	if relayed {
		c.relays = make([][]*Relay, n)
		for i := range c.relays {
			c.relays[i] = make([]*Relay, n)
			for j := range c.relays[i] {
				if j != i {
					c.relays[i][j] = NewRelay(t, fmt.Sprintf("127.0.0.1:%d", ports[j]))
				}
			}
		}
	}
	for i := 0; i < n; i++ {
		opts := embedded.Options(filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i)))
		opts.ServerName = fmt.Sprintf("n%d", i)
		opts.Tags.Add("node:" + opts.ServerName) // placement on a chosen node: Placement{Tags: {"node:n1"}}
		opts.Cluster.Name = "lanes-test"
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = ports[i]
		for j := 0; j < n; j++ {
			if j == i {
				continue
			}
			addr := fmt.Sprintf("127.0.0.1:%d", ports[j])
			if relayed {
				addr = c.relays[i][j].Addr()
				// Gossip would tell the nodes each other's real address and
				// make them connect around the relays: advertise a dead one.
				opts.Cluster.Advertise = "127.0.0.1:1"
			}
			opts.Routes = append(opts.Routes, server.RoutesFromStr("nats://"+addr)...)
		}
		c.Servers = append(c.Servers, startAsync(t, opts))
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(15 * time.Second) {
			t.Fatalf("cluster node %s did not start", s.Opts.ServerName)
		}
	}
	c.WaitForMetaLeader()
	c.WaitForJetStream()
	c.placeOnAll()
	return c
}

func startAsync(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	es := &embedded.Server{Server: s}
	t.Cleanup(es.Stop)
	ts := &Server{Server: es, Opts: opts, t: t}
	attachLog(t, ts)
	return ts
}

// Hang makes node i stop answering its peers, without leaving the cluster:
// its routes stay open and silent (StartRelayedCluster only).
func (c *Cluster) Hang(i int) {
	c.t.Helper()
	if c.relays == nil {
		c.t.Fatal("Hang needs StartRelayedCluster")
	}
	for j := range c.relays {
		if j != i {
			c.relays[i][j].Freeze()
			c.relays[j][i].Freeze()
		}
	}
}

// WaitForMetaLeader waits until the cluster can serve JetStream requests.
func (c *Cluster) WaitForMetaLeader() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.Servers {
			if s.Running() && s.JetStreamIsLeader() {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no JetStream meta leader within 20s")
}

// URLs is a comma-separated list of every node's client URL.
func (c *Cluster) URLs() string {
	var out string
	for i, s := range c.Servers {
		if i > 0 {
			out += ","
		}
		out += s.ClientURL()
	}
	return out
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
