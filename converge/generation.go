package converge

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

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

// MetaStartSeq is the lane metadata key with its generation's start
// sequence: every lane of one use of a generation starts there.
const MetaStartSeq = "lanes.start_seq"

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

// GenerationKey is the stream metadata key of a design's generation record.
func GenerationKey(design string, partitions int) string {
	return metaGenerationPrefix + design + "." + planner.Generation(partitions)
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

// merge folds an update into a record: subjects, start and state are
// replaced when given, the retirement only moves forward.
func (r GenerationRecord) merge(u GenerationRecord) GenerationRecord {
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

func (r GenerationRecord) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// laneStartSeq is the generation start a lane was created with, 0 when
// it has none.
func laneStartSeq(c jetstream.ConsumerConfig) uint64 {
	v, _ := strconv.ParseUint(c.Metadata[MetaStartSeq], 10, 64)
	return v
}

// generationStart decides where new lanes of the planned generation
// start (0: deliver all). It never skips a message no lane processed:
//
//   - on a workqueue stream acked messages are gone: deliver all already
//     starts after everything processed (and the server allows nothing else);
//   - lanes of the generation that exist carry their start: a missing one
//     starts at the same place;
//   - a generation whose use is recorded as running starts where it started;
//   - new lanes of a repartition are created held before any publish is
//     mapped to them: with the mapping in the stream, nothing is stored
//     under their subjects after the last sequence read now, so that is an
//     exact start;
//   - otherwise after the generation's retirement, when apply retired it
//     (with an account mapping, messages a server already mapped to the
//     generation before the new lanes existed are kept);
//   - a new use with the mapping in the account and no record starts after
//     the last sequence read before the generation's subject is added;
//   - else at the beginning: lanes of a live generation that nobody
//     recorded may have messages no lane has processed.
func (d *Diff) generationStart(inv *inventory, rp *repartitionState) uint64 {
	if d.retention() == "workqueue" {
		return 0
	}
	n := d.plan.Design.Partitions
	for _, cands := range inv.lanes[n] {
		for _, ci := range cands {
			if s := laneStartSeq(ci.Config); s > 0 {
				return s
			}
		}
	}
	rec := d.generationRecord(n)
	if rec.Current() {
		return rec.StartSeq
	}
	newUse := rp != nil && !rp.Switched && d.live.Stream != nil
	if newUse && d.plan.Design.Mapping == planner.MappingStream {
		return d.live.Stream.LastSeq + 1
	}
	if rec.RetiredSeq > 0 {
		return rec.RetiredSeq + 1
	}
	if newUse {
		return d.live.Stream.LastSeq + 1
	}
	return 0
}

// generationRecord is the live record of one of this design's generations.
func (d *Diff) generationRecord(n int) GenerationRecord {
	if d.live.Stream == nil {
		return GenerationRecord{}
	}
	return Generations(d.live.Stream.Metadata)[d.Design][n]
}

// retention is the stream's retention policy, live or planned.
func (d *Diff) retention() string {
	if s := d.live.Stream; s != nil {
		return s.Config.Retention
	}
	return d.plan.Stream.Retention
}
