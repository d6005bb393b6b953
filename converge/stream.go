package converge

import (
	"fmt"
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
	if d.live.Stream == nil {
		d.Stream.Action = ActionCreate
		if need > want.MaxConsumers {
			d.Stream.update = map[string]any{"max_consumers": need}
			d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "max_consumers", Old: raw(want.MaxConsumers), New: raw(need)})
		}
		return
	}
	got := d.live.Stream.Config
	update := map[string]any{}
	if subjects, added := addSubjects(got.Subjects, want.Subjects); len(added) > 0 {
		update["subjects"] = subjects
		d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "subjects", Old: raw(got.Subjects), New: raw(subjects)})
	}
	if have := effectiveMaxConsumers(got.MaxConsumers); have < need {
		update["max_consumers"] = need
		d.Stream.Changes = append(d.Stream.Changes, FieldChange{Field: "max_consumers", Old: raw(got.MaxConsumers), New: raw(need)})
	}
	if p.Design.Mapping == planner.MappingStream && !d.liveTransformIs(want.SubjectTransform) {
		change := FieldChange{Field: "subject_transform", Old: raw(got.SubjectTransform), New: raw(want.SubjectTransform)}
		if got.SubjectTransform == nil {
			change.Old = orNull(nil)
		}
		switch {
		case rp != nil:
			d.Stream.SwitchMapping = &change // after the new lanes exist, held
		case got.SubjectTransform != nil && len(inv.lanes[p.Design.Partitions]) > 0 && !d.opts.Force:
			d.refuse(fmt.Sprintf("the stream mapping would change from %s to %s with the same %d partitions: keys would move between lanes whose stored messages stay where they are, breaking per-key order. Change the partition count instead (a safe repartition), or drain the lanes and use --force",
				got.SubjectTransform.Destination, want.SubjectTransform.Destination, p.Design.Partitions))
		default:
			update["subject_transform"] = want.SubjectTransform
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
	d.Stream.Action = ActionUnchanged
	if len(update) > 0 {
		d.Stream.Action = ActionUpdate
		d.Stream.update = update
	}
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
