package planner

import "fmt"

// Bounds: the limits lanes enforces, in one place. Every path that can set
// one of these values checks it here: flags, design files, --destination,
// a live stream's transform read by inspect, and simulate's sizes.
const (
	// MaxPartitions bounds lanes per design: every lane is a consumer on
	// the server, and every per-partition loop stays finite.
	MaxPartitions = 16384

	// MaxKeysInFlight bounds keys_in_flight: a window far above the work
	// one process can run at once buys nothing, and every key in flight
	// holds a delivered message that in-progress acks keep alive.
	MaxKeysInFlight = 1024

	// MaxSubjects bounds the per-subject counts read from a stream (inspect's
	// placement check, simulate --from-stream): one page of the server's list.
	MaxSubjects = 100_000

	// Simulation sizes, refused before anything is allocated.
	MaxSimMessages = 10_000_000
	MaxSimKeys     = 1_000_000
	MaxSimWorkers  = MaxPartitions // partitions x workers per lane
	// MaxSimMemory bounds the estimated memory of one simulation.
	MaxSimMemory = 3 << 30
	// MaxLiveConnections bounds the connections a live simulation opens for
	// its workers; beyond it workers share connections.
	MaxLiveConnections = 64

	// MaxDesignFile bounds a design file.
	MaxDesignFile = 1 << 20
	// MaxKeyCount bounds the message count on one keys line.
	MaxKeyCount = 1 << 50
)

// CheckPartitions says why n cannot be a partition count, or returns nil.
func CheckPartitions(n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("must be at least 1")
	case n > MaxPartitions:
		return fmt.Errorf("more than %d lanes: every lane is a consumer on the server; use fewer partitions", MaxPartitions)
	}
	return nil
}
