package workload

import (
	"fmt"

	"github.com/lanes-dev/lanes/planner"
)

// What a simulation holds, measured with the model (GC off, so the peak is
// at most this): about 190 bytes per message for one strategy's run (its
// event queue, recorder and per-message state) plus 30 for the workload;
// about 320 bytes per key; a live worker, its goroutine and pull
// subscription, a few KiB.
const (
	bytesPerMessage = 256
	bytesPerKey     = 400
	bytesPerWorker  = 16 << 10
)

// Memory estimates the bytes a simulation of this size holds at its peak.
func Memory(messages, keys, workers int) int64 {
	return int64(messages)*bytesPerMessage + int64(keys)*bytesPerKey + int64(workers)*bytesPerWorker
}

// CheckSize refuses a simulation beyond planner's bounds before anything is
// allocated, saying how much memory it would have needed. keys may be 0
// when they are not known yet.
func CheckSize(messages, keys, workers int) error {
	need := Memory(messages, keys, workers)
	switch {
	case messages > planner.MaxSimMessages:
		return fmt.Errorf("--messages %d: a simulation takes at most %d messages (this one would need about %s of memory)", messages, planner.MaxSimMessages, Bytes(need))
	case keys > planner.MaxSimKeys:
		return fmt.Errorf("%d keys: a simulation takes at most %d keys (this one would need about %s of memory)", keys, planner.MaxSimKeys, Bytes(need))
	case workers > planner.MaxSimWorkers:
		return fmt.Errorf("%d workers in all (partitions x --workers): a simulation runs at most %d (this one would need about %s of memory)", workers, planner.MaxSimWorkers, Bytes(need))
	case need > planner.MaxSimMemory:
		return fmt.Errorf("%d messages, %d keys and %d workers would need about %s of memory; a simulation may use %s: fewer messages or keys", messages, keys, workers, Bytes(need), Bytes(planner.MaxSimMemory))
	}
	return nil
}

// KeysWithin is how many keys still fit the memory bound beside the
// messages and workers, for readers that count keys as they come.
func KeysWithin(messages, workers int) int {
	left := (planner.MaxSimMemory - Memory(messages, 0, workers)) / bytesPerKey
	return int(max(0, min(left, planner.MaxSimKeys)))
}

// Bytes writes a size for people: 512 MiB, 3.2 GiB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", max(1, n>>10))
}
