package converge

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
)

// Compare reads the live state and computes what apply would do. Lanes
// missing from a generation that runs need more reads (what their
// partitions hold, what lanes work recorded): the diff is computed again
// with them.
func Compare(ctx context.Context, conn *connect.Conn, p *planner.Plan, o Options) (*Diff, error) {
	live, err := Read(ctx, conn, p.Stream.Name)
	if err != nil {
		return nil, err
	}
	d := Compute(p, live, o)
	if missing := d.missing(); len(missing) > 0 {
		if err := readMissing(ctx, conn, p, live, o, missing); err != nil {
			return nil, err
		}
		d = Compute(p, live, o)
	}
	return d, nil
}

// Compute is the pure part of Compare: plan + live state -> diff.
func Compute(p *planner.Plan, live *Live, o Options) *Diff {
	d := &Diff{Design: p.Design.Name, plan: p, live: live, opts: o, ReadRequests: live.Requests,
		Stream: StreamChange{Name: p.Stream.Name, Action: ActionCreate}}
	inv := takeInventory(p, live)
	d.OtherConsumers = inv.others
	rp := d.repartition(inv)
	start := d.generationStart(inv, rp)
	runs := d.generationRuns(inv, rp)
	for i := range p.Lanes {
		d.Lanes = append(d.Lanes, d.planLane(i, inv, rp, start, runs))
	}
	d.otherLanes(inv, rp)
	d.compareStream(inv, rp)
	d.checkTopology()
	d.checkKeysInFlight()
	d.accountNotes(rp)
	d.summariseRefusals()
	return d
}

// inventory sorts the stream's consumers: lanes of this design by
// generation and partition, recreate records, unavailable names, others.
type inventory struct {
	design       string
	byName       map[string]*jetstream.ConsumerInfo
	lanes        map[int]map[int][]*jetstream.ConsumerInfo // generation -> partition -> lanes
	placeholders map[string]*jetstream.ConsumerInfo        // lane name -> its recreate record
	recreating   map[string]bool                           // the changes interrupted recreates were making
	unavailable  map[string]string                         // name -> why
	used         map[string]bool                           // matched to a planned lane
	others       int
}

func takeInventory(p *planner.Plan, live *Live) *inventory {
	inv := &inventory{design: p.Design.Name, byName: map[string]*jetstream.ConsumerInfo{},
		lanes: map[int]map[int][]*jetstream.ConsumerInfo{}, placeholders: map[string]*jetstream.ConsumerInfo{}, recreating: map[string]bool{},
		unavailable: map[string]string{}, used: map[string]bool{}}
	for _, ci := range named(live.Consumers) {
		inv.byName[ci.Name] = ci
		if lane := ci.Config.Metadata[planner.MetaRecreateLane]; lane != "" && ci.Config.Metadata[planner.MetaRecreateDesign] == inv.design {
			inv.placeholders[lane] = ci
			if change := ci.Config.Metadata[planner.MetaRecreateChange]; change != "" {
				inv.recreating[change] = true
			}
			continue
		}
		tag, ok := planner.TagOf(ci.Config.Metadata)
		if !ok || tag.Design != inv.design {
			inv.others++
			continue
		}
		gen := inv.lanes[tag.Partitions]
		if gen == nil {
			gen = map[int][]*jetstream.ConsumerInfo{}
			inv.lanes[tag.Partitions] = gen
		}
		gen[tag.Partition] = append(gen[tag.Partition], ci)
	}
	for _, name := range live.Consumers.Missing {
		inv.unavailable[name] = "its leader did not answer in time (cluster: no leader, or the servers holding it are down)"
	}
	for name, reason := range live.Consumers.Offline {
		inv.unavailable[name] = "offline: " + reason
	}
	return inv
}

// generations are the partition counts of this design's lanes on the
// server, including unavailable lanes whose names say which they are.
func (inv *inventory) generations() map[int]bool {
	out := map[int]bool{}
	for g, parts := range inv.lanes {
		if len(parts) > 0 {
			out[g] = true
		}
	}
	for name := range inv.unavailable {
		if g, ok := generationOfName(inv.design, name); ok {
			out[g] = true
		}
	}
	return out
}

// generationOfName reads N from a lane name "<design>-n<N>-<partition>".
func generationOfName(design, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, design+"-n")
	if !ok {
		return 0, false
	}
	gen, part, ok := strings.Cut(rest, "-")
	n, err1 := strconv.Atoi(gen)
	_, err2 := strconv.Atoi(part)
	return n, ok && err1 == nil && err2 == nil && n > 0
}

// match finds the live lane for a planned one: a lane of this design
// tagged with the same generation and partition (preferring the planned
// name), else a consumer with the planned name.
func (inv *inventory) match(gen, partition int, name string) *jetstream.ConsumerInfo {
	cands := inv.lanes[gen][partition]
	for _, ci := range cands {
		if ci.Name == name {
			return ci
		}
	}
	if len(cands) > 0 {
		return cands[0]
	}
	return inv.byName[name]
}

func placeholderName(lane string) string { return lane + "-recreate" }

// repartitionState is what the diff knows about a partition count change.
type repartitionState struct {
	*Repartition
	old map[int]bool // generations being drained
}

// repartition works out, from live state only, whether the partition
// count is changing and how far that change is. See docs/apply.md for the
// procedure: hold new lanes, switch the mapping, drain old lanes, resume
// new lanes, delete old ones.
func (d *Diff) repartition(inv *inventory) *repartitionState {
	p, n := d.plan, d.plan.Design.Partitions
	old := inv.generations()
	delete(old, n)
	if len(old) == 0 {
		return nil
	}
	gens := sortedKeys(old)
	rp := &repartitionState{Repartition: &Repartition{From: gens, To: n, Mapping: p.Design.Mapping}, old: old}
	if p.Design.Mapping == planner.MappingAccount {
		rp.Switched = d.opts.MappingSwitched
		if len(gens) > 1 {
			d.refuse(fmt.Sprintf("lanes of %s exist: a repartition is already in progress; finish it before changing the partition count again", genList(gens)))
		} else if !rp.Switched && inv.anyHeld(gens[0]) {
			d.refuse(fmt.Sprintf("the n%d lanes are held by an unfinished repartition to %d partitions: finish it (--partitions %d), or, if the account mapping still sends publishes to n%d, abandon it with --mapping-switched",
				gens[0], gens[0], gens[0], n))
		}
	} else {
		liveGen := d.liveMappingGeneration()
		rp.Switched = d.liveTransformIs(p.Stream.SubjectTransform)
		switch {
		case rp.Switched:
			// Publishes already go to the new lanes: drain whatever is older.
		case d.live.Stream != nil && d.live.Stream.Config.Replicas > 1 && !d.opts.Force:
			d.refuse(replicatedSwitchRisk(d.live.Stream.Config.Replicas))
		case liveGen != 0 && liveGen != n && inv.anyHeld(liveGen):
			d.refuse(fmt.Sprintf("a repartition to %d partitions is in progress and the mapping already sends publishes to its held n%d lanes: finish it first (--partitions %d)", liveGen, liveGen, liveGen))
		case len(gens) > 1 || (liveGen != 0 && !old[liveGen]):
			d.refuse(fmt.Sprintf("lanes of %s exist and the stream maps to %s: a repartition is already in progress; finish it (--partitions of the mapping) before changing the partition count again",
				genList(gens), genName(liveGen)))
		}
	}
	for _, g := range gens {
		for _, part := range sortedKeys(inv.lanes[g]) {
			for _, ci := range inv.lanes[g][part] {
				rp.OldLanes = append(rp.OldLanes, ci.Name)
				rp.Backlog += backlog(ci)
			}
		}
	}
	rp.Step = d.repartitionStep(rp)
	d.Repartition = rp.Repartition
	return rp
}

// replicatedSwitchRisk explains why switching a replicated stream's
// transform under load is unsafe. nats-server (2.15) proposes a message
// with its original subject and each replica applies the stream's subject
// transform when it stores it, while a stream update reaches the replicas
// through the meta group, at moments of its own: a message published
// during the switch can be stored under the old partition on one replica
// and the new one on another. Lanes led on different replicas then
// deliver it twice, never, or out of order.
func replicatedSwitchRisk(replicas int) string {
	return fmt.Sprintf("the stream has %d replicas, and nats-server applies a stream's subject transform on each replica as it stores a message, "+
		"while a stream update reaches the replicas at different moments: messages published during the switch can be stored under the old partition on one replica "+
		"and the new one on another (delivered twice, never, or out of order). Stop the publishers and re-run with --force (restart them once apply reports the mapping switched), "+
		"or use mapping: account, where the mapping applies before the stream", replicas)
}

func (d *Diff) repartitionStep(rp *repartitionState) string {
	from := genList(rp.From)
	to := genName(rp.To)
	switch {
	case rp.Switched:
		return fmt.Sprintf("wait for the %s lanes to drain (backlog %d), then resume the %s lanes and delete the %s lanes", from, rp.Backlog, to, from)
	case rp.Mapping == planner.MappingAccount:
		return fmt.Sprintf("create the %s lanes held; then the operator installs the new account mapping and re-runs apply with --mapping-switched", to)
	default:
		return fmt.Sprintf("create the %s lanes held, switch the stream mapping to %s, wait for the %s lanes to drain (backlog %d), resume the %s lanes, delete the %s lanes", to, to, from, rp.Backlog, to, from)
	}
}

func (inv *inventory) anyHeld(gen int) bool {
	for _, cands := range inv.lanes[gen] {
		for _, ci := range cands {
			if isHeld(ci.Config) {
				return true
			}
		}
	}
	return false
}

// liveMappingGeneration is the partition count of the live stream
// transform, 0 when there is none or it is not a partition mapping.
func (d *Diff) liveMappingGeneration() int {
	if d.live.Stream == nil || d.live.Stream.Config.SubjectTransform == nil {
		return 0
	}
	t := d.live.Stream.Config.SubjectTransform
	l, err := planner.ParseLayout(t.Source, t.Destination)
	if err != nil {
		return 0
	}
	return l.Partitions
}

func (d *Diff) liveTransformIs(want *planner.SubjectTransform) bool {
	if d.live.Stream == nil {
		return false
	}
	got := d.live.Stream.Config.SubjectTransform
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return *got == *want
}

// planLane decides what happens to planned lane i; runs says its
// generation is in use (a missing lane may have processed messages).
func (d *Diff) planLane(i int, inv *inventory, rp *repartitionState, start uint64, runs bool) LaneChange {
	p := d.plan
	want := p.Consumers[i]
	lc := LaneChange{Name: want.Durable, Partition: i, Partitions: p.Design.Partitions, want: want}
	ci := inv.match(p.Design.Partitions, i, want.Durable)
	ph := inv.placeholders[want.Durable]
	if ci != nil {
		inv.used[ci.Name] = true
		lc.Name, lc.want.Durable = ci.Name, ci.Name // a lane found by its tags keeps its name
	}
	if reason, ok := inv.unavailable[want.Durable]; ok && ci == nil {
		lc.Action, lc.Reason = ActionUnavailable, reason
		return lc
	}
	if reason, ok := inv.unavailable[placeholderName(want.Durable)]; ok && ci == nil {
		lc.Action, lc.Reason = ActionUnavailable, "its recreate record "+placeholderName(want.Durable)+" is unavailable: "+reason
		return lc
	}
	if ci == nil {
		lc.Held = rp != nil
		if ph != nil {
			lc.Action, lc.placeholder = ActionFinish, ph
			lc.Position = &Position{StartSeq: placeholderStart(ph)}
			lc.Reason = "an interrupted recreate: the lane is created again at its recorded position"
			return lc
		}
		lc.Action, lc.StartSeq = ActionCreate, start
		if runs {
			d.missingLane(&lc, start)
		}
		return lc
	}
	lc.live = ci
	lc.Backlog = backlog(ci)
	if tag, ok := planner.TagOf(ci.Config.Metadata); ok && tag.Design != d.Design {
		lc.Action = ActionRefused
		lc.Reason = fmt.Sprintf("consumer %s exists and is a lane of design %q: choose another design name", ci.Name, tag.Design)
		return lc
	}
	lc.Changes = consumerChanges(ci.Config, lc.want)
	lc.KeysInFlight = keysInFlightChange(ci.Config.Metadata, lc.want.Metadata)
	lc.placeholder = ph
	lc.Action = d.laneAction(&lc, ci, inv)
	if lc.Action == ActionRefused {
		return lc
	}
	d.holdOrResume(&lc, ci, rp)
	if ph != nil && lc.Action != ActionRecreate {
		lc.Reason = "its recreate record " + ph.Name + " is left from an interrupted recreate: deleted"
		if appPaused(ph, ci.Config) {
			lc.Reason += ", and the lane's pause by that recreate lifted"
		}
	}
	return lc
}

// laneAction decides between unchanged, update, recreate and refused.
// A recreate needs --recreate, or a record of an interrupted recreate of
// the same change: that apply was told --recreate, and this one finishes
// what it started, with or without the flag.
func (d *Diff) laneAction(lc *LaneChange, ci *jetstream.ConsumerInfo, inv *inventory) Action {
	filterChanged := false
	for _, c := range lc.Changes {
		if c.Field == "filter_subject" {
			filterChanged = true
		}
	}
	immutable := immutableSummary(lc.Changes)
	// A record written before records named their change (older lanes)
	// still consents for its own lane.
	consented := d.opts.Recreate || immutable != "" && (inv.recreating[immutable] ||
		lc.placeholder != nil && lc.placeholder.Config.Metadata[planner.MetaRecreateChange] == "")
	switch {
	case immutable != "" && consented:
		lc.Position = positionOf(ci)
		lc.Reason = "the server cannot update " + immutable + "; recreated at its position"
		if !d.opts.Recreate {
			lc.Reason += " (finishing an interrupted --recreate)"
		}
		return ActionRecreate
	case immutable != "":
		lc.Reason = "the server cannot update " + immutable +
			": re-run with --recreate to delete and recreate the lane at its position (after its ack floor; messages in flight are delivered again)"
		return ActionRefused
	case filterChanged && lc.Backlog > 0 && !d.opts.Force:
		lc.Reason = fmt.Sprintf("changing the filter would strand its %d undelivered or unacked messages stored under the old subjects: drain the lane first, or use --force", lc.Backlog)
		return ActionRefused
	case len(lc.Changes) > 0:
		return ActionUpdate
	}
	return ActionUnchanged
}

// immutableSummary names the changes the server refuses to make in place,
// e.g. "max_waiting 512 -> 64": the same text for every lane of one design
// change, recorded by a recreate so a re-run can finish it.
func immutableSummary(changes []FieldChange) string {
	var parts []string
	for _, c := range changes {
		if c.Immutable {
			parts = append(parts, fmt.Sprintf("%s %s -> %s", c.Field, c.Old, c.New))
		}
	}
	return strings.Join(parts, ", ")
}

// holdOrResume: during a repartition, new lanes stay held until the old
// ones drain; outside one, a lane apply held is resumed.
func (d *Diff) holdOrResume(lc *LaneChange, ci *jetstream.ConsumerInfo, rp *repartitionState) {
	held := isHeld(ci.Config)
	switch {
	case rp != nil && held:
		lc.Held = true
	case rp != nil && !rp.Switched:
		// Not held yet and the mapping still feeds the old lanes: hold it
		// before the switch, or it would run ahead of the old backlog.
		lc.Held = true
		if lc.Action != ActionRecreate {
			lc.Action = ActionHold
		}
	case rp == nil && held:
		if lc.Action != ActionRecreate {
			lc.Action = ActionResume
		}
	}
}

func placeholderStart(ph *jetstream.ConsumerInfo) uint64 {
	v, _ := strconv.ParseUint(ph.Config.Metadata[planner.MetaRecreateStartSeq], 10, 64)
	return max(v, 1)
}

// otherLanes decides about this design's lanes that are not planned:
// a repartition's old lanes, or (for --prune) duplicates and leftovers.
func (d *Diff) otherLanes(inv *inventory, rp *repartitionState) {
	for _, g := range sortedKeys(inv.lanes) {
		for _, part := range sortedKeys(inv.lanes[g]) {
			for _, ci := range inv.lanes[g][part] {
				if inv.used[ci.Name] {
					continue
				}
				lc := LaneChange{Name: ci.Name, Partition: part, Partitions: g, live: ci, Backlog: backlog(ci), Held: isHeld(ci.Config)}
				switch {
				case rp != nil && rp.old[g]:
					lc.Action = ActionDrain
				case d.opts.Prune && (drained(ci) || d.opts.Force):
					lc.Action, lc.Reason = ActionDelete, "not in the design (--prune)"
				case d.opts.Prune:
					lc.Action = ActionRefused
					lc.Reason = fmt.Sprintf("not in the design, but it still has %d undelivered or unacked messages: let it drain, or use --force to delete it anyway", lc.Backlog)
				default:
					lc.Action, lc.Reason = ActionKeep, "not in the design: --prune deletes it once drained"
				}
				d.Lanes = append(d.Lanes, lc)
			}
		}
	}
	names := make([]string, 0, len(inv.unavailable))
	for name := range inv.unavailable {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g, ok := generationOfName(inv.design, name)
		if !ok || g == d.plan.Design.Partitions {
			continue // planned lanes were reported already; other names are not ours
		}
		d.Lanes = append(d.Lanes, LaneChange{Name: name, Partitions: g, Action: ActionUnavailable, Reason: inv.unavailable[name]})
	}
}

func (d *Diff) refuse(reason string) { d.Refusals = append(d.Refusals, reason) }

// summariseRefusals adds one line per distinct lane refusal reason, so a
// thousand lanes with the same problem give one line.
func (d *Diff) summariseRefusals() {
	count := map[string]int{}
	var order []string
	for _, l := range d.Lanes {
		if l.Action != ActionRefused {
			continue
		}
		if count[l.Reason] == 0 {
			order = append(order, l.Reason)
		}
		count[l.Reason]++
	}
	for _, r := range order {
		lanes := "1 lane"
		if count[r] > 1 {
			lanes = fmt.Sprintf("%d lanes", count[r])
		}
		d.Refusals = append(d.Refusals, lanes+": "+r)
	}
}

func genName(n int) string {
	if n == 0 {
		return "no partition mapping"
	}
	return planner.Generation(n)
}

func genList(gens []int) string {
	parts := make([]string, len(gens))
	for i, g := range gens {
		parts[i] = planner.Generation(g)
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
