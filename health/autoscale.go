package health

import "sort"

// Wanted is the autoscaling figure of one design: how many lanes work
// instances its backlog can keep busy (lanes_work_instances_wanted, which
// lanes work --metrics exports too, from its own listing of the lanes).
type Wanted struct {
	Design string
	Lanes  int // the design's lanes on the stream, answered or not
	Busy   int // lanes with messages to run: backlog above 0, not paused
	// Instances is Busy, at least 1 and at most Lanes (InstancesWanted).
	Instances int
}

// InstancesWanted is the instances a design's lanes can use: one per lane
// with messages to run (busy), at least one while the design has lanes (a
// message published to an idle design needs someone to run it), and never
// more than the lanes, since an instance serves a lane alone and an
// instance beyond the lane count gets none. work/metrics.go has the same
// rule for the workers' side: the two outputs must agree.
func InstancesWanted(lanes, busy int) int {
	if lanes <= 0 {
		return 0
	}
	return min(lanes, max(1, busy))
}

// Wanted is the autoscaling figure of every design of the report's lanes,
// and of every design whose workers it read, by design name. A lane that
// did not answer counts among the lanes but not as busy: its backlog is
// unknown. A paused lane (one held for a repartition) is not busy: no
// instance can run it until it resumes.
func (r *Report) Wanted() []Wanted {
	by := map[string]*Wanted{}
	get := func(design string) *Wanted {
		w := by[design]
		if w == nil {
			w = &Wanted{Design: design}
			by[design] = w
		}
		return w
	}
	for _, l := range r.Lanes {
		if !l.Tagged || l.Design == "" {
			continue // lanes work serves only the lanes its design tagged
		}
		w := get(l.Design)
		w.Lanes++
		if l.State == StateOK && !l.Paused && l.Backlog > 0 {
			w.Busy++
		}
	}
	for _, ws := range r.Workers {
		get(ws.Design)
	}
	out := make([]Wanted, 0, len(by))
	for _, w := range by {
		w.Instances = InstancesWanted(w.Lanes, w.Busy)
		out = append(out, *w)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Design < out[b].Design })
	return out
}
