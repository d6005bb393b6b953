package converge

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// Live is what the server has now: the stream (nil when it does not exist)
// and every consumer on it, read with one STREAM.INFO and one paged
// CONSUMER.LIST pass. Nothing here is written.
type Live struct {
	Stream    *LiveStream
	Consumers *jsapi.Listing // empty when the stream does not exist
	Requests  int            // API requests the reading took
	Topology  Topology       // the servers behind the connection

	// Read by Compare only for lanes missing from a generation that runs:
	// what their partitions hold from a sequence on, and what lanes work
	// recorded about the design's lanes (LaneRecordsErr: why it could not
	// be read).
	Stored         map[StoredKey]jsapi.Stored
	LaneRecords    map[string]LaneRecord
	LaneRecordsErr string
}

// LiveStream is the stream as the server reports it.
type LiveStream struct {
	Config   planner.StreamConfig // the fields lanes decides, in API form
	Metadata map[string]string    // the stream's metadata (generation records)
	Messages uint64
	LastSeq  uint64
}

func liveStream(info *jsapi.RawStreamInfo) (*LiveStream, error) {
	ls := &LiveStream{Messages: info.State.Msgs, LastSeq: info.State.LastSeq}
	var meta struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(info.Config, &meta); err != nil {
		return nil, err
	}
	ls.Metadata = meta.Metadata
	if err := json.Unmarshal(info.Config, &ls.Config); err != nil {
		return nil, err
	}
	return ls, nil
}

// Read reads the live state of stream.
func Read(ctx context.Context, conn *connect.Conn, stream string) (*Live, error) {
	a := jsapi.New(conn)
	ctx, cancel := a.Guard(ctx)
	defer cancel()
	live := &Live{Consumers: jsapi.Empty(), Topology: TopologyOf(conn)}
	info, err := a.StreamInfoRaw(ctx, stream)
	live.Requests++
	if jsapi.IsStreamNotFound(err) {
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	ls, err := liveStream(info)
	if err != nil {
		return nil, err
	}
	live.Stream = ls
	listing, err := a.List(ctx, stream)
	if err != nil {
		return nil, err
	}
	live.Consumers = listing
	live.Requests += listing.Requests
	return live, nil
}

// effectiveMaxConsumers is the stream's consumer cap as the server applies
// it: -1 or 0 mean the server default.
func effectiveMaxConsumers(n int) int {
	if n <= 0 {
		return serverDefaultMaxConsumers
	}
	return n
}

// serverDefaultMaxConsumers is nats-server's default cap per stream.
const serverDefaultMaxConsumers = 1000

// named is the listing's consumers that have a name. In a cluster, the
// server lists a consumer whose leader is down both by name under
// "missing" and as an entry with its config but no name: such an entry
// cannot be addressed, and its lane is reported unavailable by name.
func named(l *jsapi.Listing) []*jetstream.ConsumerInfo {
	out := make([]*jetstream.ConsumerInfo, 0, len(l.Consumers))
	for _, ci := range l.Consumers {
		if ci != nil && ci.Name != "" {
			out = append(out, ci)
		}
	}
	return out
}
