package converge

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/planner"
)

// compareStream decides about the stream: created whole, or updated only
// where lanes needs it (subjects added, max_consumers raised, the mapping).
func (d *Diff) compareStream(inv *inventory, rp *repartitionState) {
	p := d.plan
	want := p.Stream
	need := d.consumersNeeded(want.MaxConsumers)
	edit := &streamEdit{}
	if d.live.Stream == nil {
		d.Stream.Action = ActionCreate
		if need > want.MaxConsumers {
			edit.maxConsumers = need
			d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "max_consumers", Old: raw(want.MaxConsumers), New: raw(need)})
		}
		d.recordGeneration(edit)
		d.Stream.edit = edit
		return
	}
	got := d.live.Stream.Config
	if subjects, added := addSubjects(got.Subjects, want.Subjects); len(added) > 0 {
		edit.subjects = added
		d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "subjects", Old: raw(got.Subjects), New: raw(subjects)})
	}
	if have := effectiveMaxConsumers(got.MaxConsumers); have < need {
		edit.maxConsumers = need
		d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "max_consumers", Old: raw(got.MaxConsumers), New: raw(need)})
	}
	if p.Design.Mapping == planner.MappingStream && !d.liveTransformIs(want.SubjectTransform) {
		change := FieldChange{Field: "subject_transform", Old: raw(got.SubjectTransform), New: raw(want.SubjectTransform)}
		if got.SubjectTransform == nil {
			change.Old = orNull(nil)
		}
		others := designsOnTransform(d.live, d.Design, got.SubjectTransform)
		switch {
		case len(others) > 0 && !d.opts.Force:
			d.refuse(sharedMappingChange(want.Name, d.Design, others, got.SubjectTransform, want.SubjectTransform))
		case rp != nil:
			d.Stream.SwitchMapping = &change // after the new lanes exist, held
		case got.SubjectTransform != nil && len(inv.lanes[p.Design.Partitions]) > 0 && !d.opts.Force:
			d.refuse(sameCountMappingChange(got.SubjectTransform, want.SubjectTransform, p.Design.Partitions))
		default:
			edit.transform = want.SubjectTransform
			d.Stream.Changes = append(d.Stream.Changes, change)
		}
	}
	if p.Design.Mapping == planner.MappingAccount && got.SubjectTransform != nil {
		d.OutOfReach = append(d.OutOfReach, fmt.Sprintf("stream %s has a subject transform (%s -> %s) but the design's mapping lives in the account: apply leaves it", want.Name, got.SubjectTransform.Source, got.SubjectTransform.Destination))
	}
	d.streamOutOfReach(got, want)
	for _, subj := range got.Subjects {
		if !slices.Contains(want.Subjects, subj) {
			d.OutOfReach = append(d.OutOfReach, fmt.Sprintf("stream subject %s is not in the design: apply never removes a subject (an older generation's, or another tool's)", subj))
		}
	}
	d.recordGeneration(edit)
	d.Stream.Action = ActionUnchanged
	if !edit.empty() {
		d.Stream.Action = ActionUpdate
		d.Stream.edit = edit
	}
}

// designsOnTransform lists, sorted, the designs other than design whose
// lanes read the stream's live subject transform: a filter that is one of
// its partitions.
func designsOnTransform(live *Live, design string, t *planner.SubjectTransform) []string {
	if t == nil {
		return nil
	}
	layout, err := planner.ParseLayout(t.Source, t.Destination)
	if err != nil {
		return nil // not a partition mapping: no lane reads it as one
	}
	seen := map[string]bool{}
	for _, ci := range named(live.Consumers) {
		tag, ok := planner.TagOf(ci.Config.Metadata)
		if !ok || tag.Design == design || seen[tag.Design] {
			continue
		}
		filter := ci.Config.FilterSubject
		if filter == "" && len(ci.Config.FilterSubjects) == 1 {
			filter = ci.Config.FilterSubjects[0]
		}
		if _, ok := layout.PartitionOfFilter(filter); ok {
			seen[tag.Design] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// sharedMappingChange explains why a design may not change a transform
// other designs' lanes read: a stream has one transform, and every
// message would go to the new partitions, none to their lanes.
func sharedMappingChange(stream, design string, others []string, got, want *planner.SubjectTransform) string {
	designs := "design " + others[0]
	if len(others) > 1 {
		designs = "designs " + strings.Join(others, ", ")
	}
	share := "the same mapping"
	if old, err := planner.ParseLayout(got.Source, got.Destination); err == nil {
		share = fmt.Sprintf("the same mapping (%d partitions, the same subjects)", old.Partitions)
	}
	wantN := ""
	if nu, err := planner.ParseLayout(want.Source, want.Destination); err == nil {
		wantN = fmt.Sprintf(", %d partitions", nu.Partitions)
	}
	return fmt.Sprintf("the subject transform of stream %s, %s -> %s, feeds the lanes of %s: changing it for design %s (to %s%s) would send every new message to the lanes of design %s and none to theirs. "+
		"Designs on one stream share its one transform: give design %s %s to get every message beside them, or use a separate stream (stream.name, on subjects no other stream stores) or an account mapping (mapping: account). "+
		"--force changes it anyway (to repartition the designs of a stream one after another: the others' lanes get nothing new until each is applied with the new mapping)",
		stream, got.Source, got.Destination, designs, design, want.Destination, wantN, design, design, share)
}

// sameCountMappingChange explains why changing the mapping of a design
// whose lanes exist outside a repartition is refused: keys move between
// lanes, or (when only the partitioned subjects' literal tokens change)
// the stored messages stay under subjects the lanes no longer read; or
// the stream maps to another count already (changed by hand, or by a
// design since deleted), and the messages stored since wait where no lane
// of this design reads them.
func sameCountMappingChange(got, want *planner.SubjectTransform, n int) string {
	old, err1 := planner.ParseLayout(got.Source, got.Destination)
	nu, err2 := planner.ParseLayout(want.Source, want.Destination)
	if err1 == nil && err2 == nil && old.Partitions != nu.Partitions {
		return fmt.Sprintf("the stream maps to %d partitions (%s), not this design's %d, and no lane of another design reads that mapping: this design's %s lanes receive no new message. "+
			"Switching it back sends new messages to them while those stored under %s stay where no lane of this design reads them, and their keys' order breaks if they are processed later. "+
			"Find out who changed it (lanes inspect --stream shows what is stored there); process or purge those messages, then use --force",
			old.Partitions, got.Destination, n, planner.Generation(n), old.Pattern())
	}
	if err1 == nil && err2 == nil && old.Source == nu.Source && old.Partitions == nu.Partitions && slices.Equal(old.KeyTokens, nu.KeyTokens) {
		return fmt.Sprintf("the stream mapping would store messages under %s instead of %s (same %d partitions, every key stays in its partition): the lanes' filters move to the new subjects, and the messages already stored under the old ones would be left where no lane reads them. Drain the lanes (stop the publishers) and use --force, or keep the current subjects (--prefix, --destination)",
			nu.Pattern(), old.Pattern(), n)
	}
	return fmt.Sprintf("the stream mapping would change from %s to %s with the same %d partitions: keys would move between lanes whose stored messages stay where they are, breaking per-key order. Change the partition count instead (a safe repartition), or drain the lanes and use --force",
		got.Destination, want.Destination, n)
}

// recordGeneration adds to the edit the start of a new use of the planned
// generation, when this run creates its lanes with a start sequence:
// later runs and inspect read it from the stream's metadata.
func (d *Diff) recordGeneration(edit *streamEdit) {
	start := uint64(0)
	for _, l := range d.Lanes {
		if l.StartSeq > 0 && l.Action == ActionCreate {
			start = l.StartSeq
			break
		}
	}
	if start == 0 {
		return
	}
	n := d.plan.Design.Partitions
	rec := d.generationRecord(n)
	if rec.StartSeq == start && rec.Current() && rec.Subjects == d.plan.Layout.Pattern() {
		return
	}
	key := planner.GenerationKey(d.Design, n)
	edit.generation(key, planner.GenerationRecord{Subjects: d.plan.Layout.Pattern(), StartSeq: start, State: planner.GenerationActive})
	change := FieldChange{Field: "metadata." + key, Old: orNull(nil), New: raw(rec.Merge(edit.generations[key]).String())}
	if d.live.Stream != nil && d.live.Stream.Metadata[key] != "" {
		change.Old = raw(d.live.Stream.Metadata[key])
	}
	d.Stream.Changes = append(d.Stream.Changes, change)
}

// consumersNeeded is the max_consumers the stream needs: the design's,
// or more if the lanes being added would not fit beside the existing ones.
func (d *Diff) consumersNeeded(designed int) int {
	adding := 0
	for _, l := range d.Lanes {
		switch l.Action {
		case ActionCreate, ActionFinish, ActionRecreate: // a recreate briefly adds its record
			adding++
		}
	}
	return max(designed, len(named(d.live.Consumers))+len(d.live.Consumers.Missing)+adding)
}

func (d *Diff) streamOutOfReach(got, want planner.StreamConfig) {
	check := func(field, have, designed string) {
		if have != designed {
			d.OutOfReach = append(d.OutOfReach, fmt.Sprintf("stream %s: live %s, design %s (used only when apply creates the stream)", field, have, designed))
		}
	}
	check("retention", got.Retention, want.Retention)
	check("storage", got.Storage, want.Storage)
	check("num_replicas", strconv.Itoa(got.Replicas), strconv.Itoa(want.Replicas))
}

// addSubjects returns live subjects plus the wanted ones not already
// covered; apply never removes a subject.
func addSubjects(live, want []string) ([]string, []string) {
	out := append([]string(nil), live...)
	var added []string
	for _, w := range want {
		covered := false
		for _, l := range live {
			if subjectCovers(l, w) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, w)
			added = append(added, w)
		}
	}
	return out, added
}

// subjectCovers reports whether every subject matching sub also matches pattern.
func subjectCovers(pattern, sub string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(sub, ".")
	for i, t := range pt {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if t != "*" && t != st[i] {
			return false
		}
		if t == "*" && st[i] == ">" {
			return false
		}
	}
	return len(pt) == len(st)
}

// accountNotes says what the operator must do and what apply cannot check
// when the mapping lives in the account.
func (d *Diff) accountNotes(rp *repartitionState) {
	p := d.plan
	if p.Design.Mapping != planner.MappingAccount {
		return
	}
	n := &AccountNotes{Source: p.Mapping.Source, Destination: p.Mapping.Destination, Unverified: []string{
		"that the account mapping is installed: it lives in the server configuration (or the account JWT), which a client cannot read",
		"that every server (cluster, supercluster, leaf nodes) has reloaded it: a mapping applies where a message enters",
		"that no publisher writes to the partitioned subjects directly, around the mapping",
	}}
	if rp != nil {
		n.Unverified = append(n.Unverified, fmt.Sprintf(
			"that no server still maps publishes to %s once you pass --mapping-switched: such messages would wait in the stream with no lane after the old lanes are deleted", genList(rp.From)))
		if !rp.Switched {
			var arrived int64
			for _, l := range d.Lanes {
				if l.Partitions == rp.To && l.live != nil {
					arrived += int64(l.live.NumPending)
				}
			}
			if arrived > 0 {
				n.Unverified = append(n.Unverified, fmt.Sprintf(
					"%d messages already wait in the held %s lanes: the new mapping is in place on at least one server", arrived, genName(rp.To)))
			}
		}
	}
	d.Account = n
}

// streamEdit is what apply decided to change on the stream. A stream
// update replaces the whole config, so an edit is applied to the config
// read just before the update is sent: what others changed since the diff
// was computed (max_age, other subjects, metadata) stays as they left it.
type streamEdit struct {
	subjects     []string                  // added unless a live subject covers them
	maxConsumers int                       // raised to at least this, never lowered
	transform    *planner.SubjectTransform // set when not nil
	generations  map[string]planner.GenerationRecord
}

func (e *streamEdit) empty() bool {
	return e == nil || len(e.subjects) == 0 && e.maxConsumers == 0 && e.transform == nil && len(e.generations) == 0
}

func (e *streamEdit) generation(key string, rec planner.GenerationRecord) {
	if e.generations == nil {
		e.generations = map[string]planner.GenerationRecord{}
	}
	e.generations[key] = e.generations[key].Merge(rec)
}

// onto applies the edit to a stream config in API form and reports
// whether it changed anything.
func (e *streamEdit) onto(body map[string]json.RawMessage) bool {
	if e.empty() {
		return false
	}
	changed := false
	set := func(field string, v any) {
		b := raw(v)
		if !jsonEqual(body[field], b) {
			body[field] = b
			changed = true
		}
	}
	if len(e.subjects) > 0 {
		var live []string
		_ = json.Unmarshal(body["subjects"], &live)
		if subjects, added := addSubjects(live, e.subjects); len(added) > 0 {
			set("subjects", subjects)
		}
	}
	if e.maxConsumers > 0 {
		var live int
		_ = json.Unmarshal(body["max_consumers"], &live)
		if effectiveMaxConsumers(live) < e.maxConsumers {
			set("max_consumers", e.maxConsumers)
		}
	}
	if e.transform != nil {
		set("subject_transform", e.transform)
	}
	if len(e.generations) > 0 {
		meta := map[string]string{}
		_ = json.Unmarshal(body["metadata"], &meta)
		if meta == nil {
			meta = map[string]string{}
		}
		differs := false
		for k, rec := range e.generations {
			var old planner.GenerationRecord
			_ = json.Unmarshal([]byte(meta[k]), &old)
			if v := old.Merge(rec).String(); v != meta[k] {
				meta[k], differs = v, true
			}
		}
		if differs {
			set("metadata", meta)
		}
	}
	return changed
}
