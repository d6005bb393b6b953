package converge

import (
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// Where a generation's new lanes start: apply records each use of a
// generation in the stream's metadata (planner.GenerationRecord), and each
// lane its start (planner.MetaStartSeq).

// laneStartSeq is the generation start a lane was created with, 0 when
// it has none.
func laneStartSeq(c jetstream.ConsumerConfig) uint64 {
	v, _ := strconv.ParseUint(c.Metadata[planner.MetaStartSeq], 10, 64)
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
func (d *Diff) generationRecord(n int) planner.GenerationRecord {
	if d.live.Stream == nil {
		return planner.GenerationRecord{}
	}
	return planner.Generations(d.live.Stream.Metadata)[d.Design][n]
}

// retention is the stream's retention policy, live or planned.
func (d *Diff) retention() string {
	if s := d.live.Stream; s != nil {
		return s.Config.Retention
	}
	return d.plan.Stream.Retention
}
