package converge

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// DefaultDrainPoll is how often a repartition checks the old lanes' backlog.
const DefaultDrainPoll = 250 * time.Millisecond

// repartition runs the steps after the new lanes exist and are held:
// switch the mapping, wait for the old lanes to drain, resume the new
// lanes, delete the old ones. Each step is read back from the server, so
// a re-run after any interruption continues where this one stopped.
func (x *executor) repartition(ctx context.Context) error {
	rp := x.d.Repartition
	if rp == nil {
		return nil
	}
	if !rp.Switched {
		if u := x.d.Unavailable(); len(u) > 0 {
			// An unreadable new lane may not be held: publishes must not
			// reach it before the old lanes drain.
			x.res.Incomplete = append(x.res.Incomplete, fmt.Sprintf("the mapping was not switched: %d lanes could not be read (%s)", len(u), shortList(u, 5)))
			return nil
		}
		if rp.Mapping == planner.MappingAccount {
			m := x.d.plan.Mapping
			x.res.Incomplete = append(x.res.Incomplete, fmt.Sprintf(
				"the %s lanes exist and are held: install the account mapping %s -> %s on every server (lanes plan -o conf or -o nsc), then re-run apply with --mapping-switched",
				planner.Generation(rp.To), m.Source, m.Destination))
			return nil
		}
		if err := x.switchMapping(ctx); err != nil {
			return err
		}
	}
	listing, processed, err := x.waitDrained(ctx)
	if err != nil || listing == nil {
		return err
	}
	if err := x.retireOld(ctx, listing, processed); err != nil {
		return err
	}
	if err := x.resumeNew(ctx, listing); err != nil {
		return err
	}
	return x.deleteOld(ctx, listing)
}

// switchMapping points the stream's subject transform at the new lanes.
// From the update on, every publish is stored for a new (held) lane.
// On a replicated stream this is only safe with no publishes in flight
// (see replicatedSwitchRisk): the stream's last sequence is compared
// before and after, and a warning says if it moved.
func (x *executor) switchMapping(ctx context.Context) error {
	before, _, err := x.updateStream(ctx, &streamEdit{transform: x.d.plan.Stream.SubjectTransform})
	if err != nil {
		return err
	}
	x.res.MappingSwitched = true
	var cfg planner.StreamConfig
	_ = json.Unmarshal(before.Config, &cfg)
	if cfg.Replicas > 1 {
		if after, err := x.a.StreamInfoRaw(ctx, x.stream); err == nil && after.State.LastSeq != before.State.LastSeq {
			x.res.Warnings = append(x.res.Warnings, fmt.Sprintf(
				"messages were published while the mapping of this %d-replica stream switched (stream sequences %d..%d): their replicas may disagree on their partition; check those keys' order",
				cfg.Replicas, before.State.LastSeq+1, after.State.LastSeq))
		}
	}
	return nil
}

// oldLanes are the listed lanes of the generations being drained, and the
// unavailable names that belong to them.
func (x *executor) oldLanes(l *jsapi.Listing) (lanes []*jetstream.ConsumerInfo, unavailable []string) {
	old := map[int]bool{}
	for _, g := range x.d.Repartition.From {
		old[g] = true
	}
	for _, ci := range named(l) {
		if tag, ok := planner.TagOf(ci.Config.Metadata); ok && tag.Design == x.d.Design && old[tag.Partitions] {
			lanes = append(lanes, ci)
		}
	}
	names := append([]string(nil), l.Missing...)
	for name := range l.Offline {
		names = append(names, name)
	}
	for _, name := range names {
		if g, ok := generationOfName(x.d.Design, name); ok && old[g] {
			unavailable = append(unavailable, name)
		}
	}
	sort.Strings(unavailable)
	return lanes, unavailable
}

// waitDrained polls the old lanes until none has anything left to deliver
// or ack, seen twice in a row (so a message stored just as the mapping
// switched is not missed). It returns the last listing and the stream
// sequence up to which every message of the old generations was processed
// (the last sequence read before the first of the two listings: the second
// one counts every message stored before it), or a nil listing when the
// drain timeout passed: the result then says what is left.
func (x *executor) waitDrained(ctx context.Context) (*jsapi.Listing, uint64, error) {
	poll := x.o.DrainPoll
	if poll <= 0 {
		poll = DefaultDrainPoll
	}
	start := time.Now()
	deadline := start.Add(x.o.DrainTimeout)
	report := &DrainReport{Initial: -1}
	x.res.Drain = report
	confirmed := 0
	var processed uint64
	for {
		info, err := x.a.StreamInfoRaw(ctx, x.stream)
		if err != nil {
			return nil, 0, err
		}
		listing, err := x.a.List(ctx, x.stream)
		if err != nil {
			return nil, 0, err
		}
		lanes, unavailable := x.oldLanes(listing)
		var remaining int64
		for _, ci := range lanes {
			remaining += backlog(ci)
		}
		if report.Initial < 0 {
			report.Initial = remaining
		}
		report.Lanes, report.Remaining, report.Waited = len(lanes)+len(unavailable), remaining, time.Since(start)
		x.progress(PhaseDrain, max(report.Initial-remaining, 0), max(report.Initial, remaining))
		if remaining == 0 && len(unavailable) == 0 {
			if confirmed++; confirmed == 1 {
				processed = info.State.LastSeq // read before this listing
			}
			if confirmed == 2 || len(lanes) == 0 {
				report.Drained = true
				if len(lanes) == 0 {
					processed = info.State.LastSeq
				}
				return listing, processed, nil
			}
		} else {
			confirmed = 0
			if !time.Now().Before(deadline) {
				x.res.Incomplete = append(x.res.Incomplete, x.drainIncomplete(lanes, unavailable, remaining))
				return nil, 0, nil
			}
		}
		wait := poll
		if confirmed == 0 {
			wait = min(poll, time.Until(deadline))
		}
		select {
		case <-ctx.Done():
			return nil, 0, context.Cause(ctx)
		case <-time.After(max(wait, 0)):
		}
	}
}

// retireOld records in the stream's metadata that the old generations
// were drained: every message of theirs up to processed was processed by
// their lanes. Written before their lanes are deleted, so a later return to
// one of these partition counts starts after them, and inspect reports
// them as retired (not as messages no lane delivers).
func (x *executor) retireOld(ctx context.Context, l *jsapi.Listing, processed uint64) error {
	lanes, _ := x.oldLanes(l)
	edit := &streamEdit{}
	for _, ci := range lanes {
		tag, _ := planner.TagOf(ci.Config.Metadata)
		key := planner.GenerationKey(x.d.Design, tag.Partitions)
		if _, done := edit.generations[key]; done {
			continue
		}
		rec := planner.GenerationRecord{RetiredSeq: processed, State: planner.GenerationRetired}
		if layout, err := planner.ParseLayout(tag.Source, tag.Destination); err == nil {
			rec.Subjects = layout.Pattern()
		}
		edit.generation(key, rec)
	}
	_, _, err := x.updateStream(ctx, edit)
	return err
}

func (x *executor) drainIncomplete(lanes []*jetstream.ConsumerInfo, unavailable []string, remaining int64) string {
	rp := x.d.Repartition
	var busy, heldBusy []string
	sort.Slice(lanes, func(i, j int) bool { return backlog(lanes[i]) > backlog(lanes[j]) })
	for _, ci := range lanes {
		if backlog(ci) == 0 {
			continue
		}
		busy = append(busy, fmt.Sprintf("%s: %d", ci.Name, backlog(ci)))
		if isHeld(ci.Config) {
			heldBusy = append(heldBusy, ci.Name)
		}
	}
	msg := fmt.Sprintf("the %s lanes still have %d messages to process after --drain-timeout %s (%s); their workers must keep running. The %s lanes stay held and publishes already go to them",
		genList(rp.From), remaining, x.o.DrainTimeout, shortList(busy, 5), planner.Generation(rp.To))
	if len(unavailable) > 0 {
		msg += fmt.Sprintf("; %d old lanes could not be read (%s)", len(unavailable), shortList(unavailable, 5))
	}
	if len(heldBusy) > 0 {
		msg += fmt.Sprintf("; %s held by apply itself and cannot drain: an earlier repartition left them paused", strings.Join(heldBusy, ", "))
	}
	return msg
}

// resumeNew lifts the hold on the new generation's lanes.
func (x *executor) resumeNew(ctx context.Context, l *jsapi.Listing) error {
	p := x.d.plan
	var work []*LaneChange
	for _, ci := range named(l) {
		tag, ok := planner.TagOf(ci.Config.Metadata)
		if !ok || tag.Design != x.d.Design || tag.Partitions != p.Design.Partitions || !isHeld(ci.Config) {
			continue
		}
		want := p.Consumers[tag.Partition]
		want.Durable = ci.Name
		work = append(work, &LaneChange{Name: ci.Name, Partition: tag.Partition, Partitions: tag.Partitions, Action: ActionResume, live: ci, want: want})
	}
	errs := x.parallel(ctx, PhaseResume, len(work), func(ctx context.Context, i int) error {
		if err := x.changeLane(ctx, work[i].Name, work[i].live.Config, work[i].want, ActionResume); err != nil {
			return err
		}
		x.count(func(r *Result) { r.Resumed++ })
		return nil
	})
	return x.failed(ctx, work, errs)
}

// deleteOld deletes the drained lanes of the old generations.
func (x *executor) deleteOld(ctx context.Context, l *jsapi.Listing) error {
	lanes, _ := x.oldLanes(l)
	work := make([]*LaneChange, len(lanes))
	for i, ci := range lanes {
		work[i] = &LaneChange{Name: ci.Name, Action: ActionDrain, live: ci}
	}
	return x.deleteLanes(ctx, work)
}
