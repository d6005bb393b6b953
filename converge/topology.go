package converge

import (
	"fmt"

	"github.com/lanes-dev/lanes/connect"
)

// Topology is what the connection says about the servers behind it:
// enough to know before the first write what the server will refuse for
// its size (replicas: 3 on a single server), or its version (key-parallel
// lanes on a server older than 2.11).
type Topology struct {
	// Clustered: the server is part of a cluster.
	Clustered bool
	// Servers is how many servers of the cluster the client knows (those
	// given and those the cluster advertises); 1 when not clustered. A
	// cluster that does not advertise its servers may have more.
	Servers int
	// Version is the connected server's version, as its INFO says ("":
	// unknown).
	Version string
}

// TopologyOf reads the topology from the connection's server info: no request.
func TopologyOf(conn *connect.Conn) Topology {
	if conn == nil || conn.NC == nil {
		return Topology{}
	}
	version := conn.NC.ConnectedServerVersion()
	if conn.NC.ConnectedClusterName() == "" {
		return Topology{Servers: 1, Version: version}
	}
	return Topology{Clustered: true, Servers: len(conn.NC.Servers()), Version: version}
}

// checkTopology refuses, before anything is written, what the server
// would refuse for its size: a replicated stream or lane on a server that
// is not clustered, lanes with more replicas than their stream.
func (d *Diff) checkTopology() {
	t := d.live.Topology
	if t.Servers == 0 {
		return // unknown (a Live made by hand)
	}
	p := d.plan
	streamReplicas := p.Stream.Replicas
	if d.live.Stream != nil {
		streamReplicas = d.live.Stream.Config.Replicas
	} else if streamReplicas > 1 && !t.Clustered {
		d.refuse(fmt.Sprintf("stream.replicas is %d but the server is not clustered: it can only hold 1 replica (set --replicas 1, or apply to a cluster of at least %d servers)", streamReplicas, streamReplicas))
	}
	lane := p.Design.Lane.Replicas
	if !d.changesLanes() || lane <= 1 {
		return
	}
	switch {
	case !t.Clustered:
		d.refuse(fmt.Sprintf("lane.replicas is %d but the server is not clustered: lanes can only have 1 replica (set --lane-replicas 0 or 1)", lane))
	case lane > max(streamReplicas, 1):
		d.refuse(fmt.Sprintf("lane.replicas is %d, more than the stream's %d replicas: the server refuses such consumers (set --lane-replicas to at most %d, or 0 for the stream's)", lane, streamReplicas, streamReplicas))
	}
}

// changesLanes reports whether apply would write any lane's config.
func (d *Diff) changesLanes() bool {
	for _, l := range d.Lanes {
		switch l.Action {
		case ActionCreate, ActionUpdate, ActionRecreate, ActionFinish, ActionHold, ActionResume:
			return true
		}
	}
	return false
}
