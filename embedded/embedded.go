// Package embedded runs a nats-server with JetStream inside the lanes
// process: the "no setup" server for simulate --live, and the base of the
// test servers.
package embedded

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
}

// Options returns the settings of a single JetStream server listening on
// 127.0.0.1 only, on a free port, storing into dir.
func Options(dir string) *server.Options {
	return &server.Options{
		ServerName: "lanes-embedded",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
		// Room for benchmarks with thousands of lanes.
		JetStreamLimits: server.JSLimitOpts{},
	}
}

// Start runs a server with opts and waits until it accepts clients and
// JetStream is ready.
func Start(opts *server.Options) (*Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start within 15s")
	}
	return &Server{s}, nil
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
