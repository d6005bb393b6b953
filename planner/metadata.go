package planner

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The lanes.* metadata: what lanes writes on consumers and on the stream,
// and the only way it finds its lanes and their history again (never by
// naming conventions). Other tools can read it too.

// Lane tags: plan writes them on every lane.
const (
	MetaDesign      = "lanes.design"
	MetaPartition   = "lanes.partition"
	MetaPartitions  = "lanes.partitions"
	MetaSource      = "lanes.source"
	MetaDestination = "lanes.destination"
	// MetaKeysInFlight is on key-parallel lanes only (keys_in_flight
	// above 1): how many keys lanes work runs at once.
	MetaKeysInFlight = "lanes.keys_in_flight"
)

// Lane metadata apply adds.
const (
	// MetaStartSeq is the stream sequence where every lane of one use of
	// a generation starts.
	MetaStartSeq = "lanes.start_seq"
	// MetaHeld marks a lane paused by apply itself during a repartition, so
	// that apply can tell its own hold from an operator's pause.
	MetaHeld = "lanes.held"
)

// A recreate record: the metadata of the placeholder consumer
// <lane>-recreate that apply keeps while it recreates a lane at its
// position (a change the server cannot make by an update).
const (
	MetaRecreateLane      = "lanes.recreate.lane"
	MetaRecreateDesign    = "lanes.recreate.design"
	MetaRecreateStartSeq  = "lanes.recreate.start_seq"
	MetaRecreatePauseTill = "lanes.recreate.pause_until"
	// MetaRecreateChange is the change being made ("max_waiting 512 ->
	// 64"): a re-run finishes the recreate of every lane with that change,
	// with or without --recreate.
	MetaRecreateChange = "lanes.recreate.change"
	// MetaRecreatePaused says apply pauses the lane for the recreate (it
	// was not paused): a re-run lifts that pause.
	MetaRecreatePaused = "lanes.recreate.paused"
	// MetaRecreateExact says start_seq was read from the paused lane; without
	// it, start_seq is a lower bound read before the pause.
	MetaRecreateExact = "lanes.recreate.exact"
)

// Tag is what a lane's metadata says about it.
type Tag struct {
	Design      string
	Partition   int
	Partitions  int
	Source      string
	Destination string
	// KeysInFlight is 1 on a serial lane, K on a key-parallel one.
	KeysInFlight int
}

// TagOf reads the lane metadata plan writes on every lane (see MetaDesign);
// ok is false for consumers that are not tagged as lanes, or whose partition
// figures do not make sense.
func TagOf(metadata map[string]string) (Tag, bool) {
	design, ok := metadata[MetaDesign]
	if !ok {
		return Tag{}, false
	}
	p, err1 := strconv.Atoi(metadata[MetaPartition])
	n, err2 := strconv.Atoi(metadata[MetaPartitions])
	if err1 != nil || err2 != nil || n < 1 || p < 0 || p >= n {
		return Tag{}, false
	}
	k := 1
	if v, ok := metadata[MetaKeysInFlight]; ok {
		if k, err1 = strconv.Atoi(v); err1 != nil || k < 1 {
			return Tag{}, false
		}
	}
	return Tag{Design: design, Partition: p, Partitions: n,
		Source: metadata[MetaSource], Destination: metadata[MetaDestination], KeysInFlight: k}, true
}

// Generation records: the stream's metadata.
//
// A generation is one partition count of a design: its partitioned
// subjects carry the count (msgs.received_from.n8.3.alice), and so do its
// lanes' names. A limits-retention stream keeps a generation's messages
// after apply has drained and deleted its lanes, and a return to that
// count (8 -> 16 -> 8) puts new lanes on the same subjects: they must start
// after what the earlier lanes processed, or every old message is
// delivered again, out of order.
//
// Apply records each use of a generation in the stream's metadata, one key
// per design and generation (GenerationKey), so later runs and inspect know
// where its lanes start and up to where its messages were processed.

// metaGenerationPrefix starts the stream metadata key of a generation record.
const metaGenerationPrefix = "lanes.generation."

// GenerationRecord is what the stream's metadata says about one
// generation of a design.
type GenerationRecord struct {
	// Subjects is the generation's stored subjects (msgs.received_from.n8.*.*).
	Subjects string `json:"subjects"`
	// StartSeq is where the lanes of its latest use start (0: at the
	// beginning of the stream).
	StartSeq uint64 `json:"start_seq,omitempty"`
	// RetiredSeq: every message of the generation up to this stream
	// sequence was processed by its lanes before apply deleted them (0: never
	// retired).
	RetiredSeq uint64 `json:"retired_seq,omitempty"`
	// State is "active" from the start of a use until its retirement, then
	// "retired". (The sequences alone cannot tell: a use during which
	// nothing was published retires at its own start - 1.)
	State string `json:"state,omitempty"`
}

// Generation record states.
const (
	GenerationActive  = "active"
	GenerationRetired = "retired"
)

// Current reports whether the generation's latest use is still running.
func (r GenerationRecord) Current() bool { return r.State == GenerationActive }

// Retired reports whether apply drained and deleted the generation's lanes
// since it was last used.
func (r GenerationRecord) Retired() bool { return r.State == GenerationRetired }

// GenerationKey is the stream metadata key of a design's generation record:
// lanes.generation.<design>.n<partitions>.
func GenerationKey(design string, partitions int) string {
	return metaGenerationPrefix + design + "." + Generation(partitions)
}

// Generations reads the generation records of every design from stream
// metadata: design -> partition count -> record. Unreadable values are
// skipped (another tool's keys).
func Generations(meta map[string]string) map[string]map[int]GenerationRecord {
	out := map[string]map[int]GenerationRecord{}
	for k, v := range meta {
		rest, ok := strings.CutPrefix(k, metaGenerationPrefix)
		if !ok {
			continue
		}
		i := strings.LastIndex(rest, ".n")
		if i <= 0 {
			continue
		}
		n, err := strconv.Atoi(rest[i+2:])
		var rec GenerationRecord
		if err != nil || n <= 0 || json.Unmarshal([]byte(v), &rec) != nil {
			continue
		}
		design := rest[:i]
		if out[design] == nil {
			out[design] = map[int]GenerationRecord{}
		}
		out[design][n] = rec
	}
	return out
}

// Merge folds an update into a record: subjects, start and state are
// replaced when given, the retirement only moves forward.
func (r GenerationRecord) Merge(u GenerationRecord) GenerationRecord {
	if u.Subjects != "" {
		r.Subjects = u.Subjects
	}
	if u.StartSeq != 0 {
		r.StartSeq = u.StartSeq
	}
	if u.State != "" {
		r.State = u.State
	}
	r.RetiredSeq = max(r.RetiredSeq, u.RetiredSeq)
	return r
}

// String is the record as its metadata value (JSON).
func (r GenerationRecord) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}
