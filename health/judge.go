package health

import (
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// Judge turns a snapshot into a report: it recognises the lanes among the
// consumers (by metadata, or by a filter that is one partition of a known
// layout), computes their figures, and records every finding. It is pure:
// no I/O, no clock (times come from the snapshot), so every rule is tested
// on hand-made snapshots.
func Judge(s *Snapshot, o Options) *Report {
	r := &Report{
		Stream:       s.Stream,
		Time:         s.Time,
		Requests:     s.Requests,
		LastSeq:      s.Info.State.LastSeq,
		Messages:     s.Info.State.Msgs,
		Subjects:     int(s.Info.State.NumSubjects),
		MaxConsumers: s.Info.Config.MaxConsumers,
		Replicas:     s.Info.Config.Replicas,
		Consumers:    s.Info.State.Consumers,
	}
	j := &judge{report: r, headsTimedOut: s.HeadsFailed, design: o.Design, afterRetirement: s.AfterRetirement}
	if j.design == "" && o.Plan != nil {
		j.design = o.Plan.Design.Name
	}
	layouts := j.layouts(s.Info, o.Plan, s.Consumers)
	cover := j.recognise(s.Consumers, layouts)
	for i := range r.Lanes {
		l := &r.Lanes[i]
		if m, ok := s.Heads[l.Name]; ok {
			l.Head = &Head{Seq: m.Seq, Subject: m.Subject, Time: m.Time, Key: storedKey(layouts, m.Subject)}
		}
	}
	j.attachWorkers(s)
	j.placement = j.placementOf(s, o, layouts)
	j.judgeLanes()
	j.judgeStream(s.Info, layouts, cover)
	r.keepDesign(o.Design, o.Plan)
	sortFindings(r.Findings)
	r.Summarize()
	return r
}

// headLookup is a lane whose head message is worth reading: the first
// message on its filter from its ack floor + 1, never before the lane's
// start (in a cluster a lane created at a start sequence reports ack floor
// 0 until its first ack, and from 1 the lookup would find the messages an
// earlier generation of the same partition count processed).
type headLookup struct {
	lane, filter string
	from         uint64
}

// survey is the judge's view of which consumers are lanes with a backlog
// and which layouts the stream has, findings aside: Read uses it to know
// which head messages and whether the subject list are worth reading.
func survey(s *Snapshot, o Options) ([]headLookup, []*layout) {
	j := &judge{report: &Report{Stream: s.Stream}, mismatched: map[string]int{}}
	layouts := j.layouts(s.Info, o.Plan, s.Consumers)
	var heads []headLookup
	for _, ci := range s.Consumers.Consumers {
		if ci.Name == "" {
			continue
		}
		if l, _, ok := j.laneOf(ci, layouts); ok && l.Backlog > 0 && l.Filter != "" {
			from := l.AckFloorSeq + 1
			if ci.Config.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
				from = max(from, ci.Config.OptStartSeq)
			}
			heads = append(heads, headLookup{lane: l.Name, filter: l.Filter, from: from})
		}
	}
	return heads, layouts
}

// placementOf checks where the snapshot's subjects are stored, when the
// check applies: too many subjects to read is a result too (unchecked),
// a list that did not arrive is a finding.
func (j *judge) placementOf(s *Snapshot, o Options, layouts []*layout) *placementResult {
	limit := o.maxSubjects()
	switch {
	case limit < 0 || len(layouts) == 0 || s.Info.State.Msgs == 0:
		return nil
	case s.Info.State.NumSubjects > uint64(limit):
		return &placementResult{unchecked: int(s.Info.State.NumSubjects), limit: limit}
	case s.SubjectsFailed != "":
		j.add(Finding{Severity: Info, Code: "placement_unchecked",
			Message: "placement not checked: the stream's subject list did not arrive: " + s.SubjectsFailed,
			Advice:  "run inspect again, or raise --timeout"})
		return nil
	case s.Subjects == nil:
		return nil // not read
	}
	return checkPlacement(s.Subjects, layouts)
}

func storedKey(layouts []*layout, subject string) string {
	for _, l := range layouts {
		if k, ok := l.parsed.StoredKey(subject); ok {
			return k
		}
	}
	return ""
}

// placementResult counts messages by where they are stored.
type placementResult struct {
	unpartitioned, misplaced           uint64 // messages
	unpartitionedSubjects, misplacedN  int    // subjects
	unpartitionedSample, misplacedList []string
	unchecked, limit                   int               // subjects, when there were too many to check
	unmatched                          map[string]uint64 // unpartitioned subjects -> messages (retired generations are told apart in findings.go)
}

func checkPlacement(subjects map[string]uint64, layouts []*layout) *placementResult {
	res := &placementResult{unmatched: map[string]uint64{}}
	names := make([]string, 0, len(subjects))
	for s := range subjects {
		names = append(names, s)
	}
	sort.Strings(names) // examples are stable from run to run
	for _, s := range names {
		n := subjects[s]
		matched, misplaced := false, ""
		for _, l := range layouts {
			p := l.parsed.Placed(s)
			if !p.Matches {
				continue
			}
			matched = true
			if p.Partition != p.Expected {
				key, _ := l.parsed.StoredKey(s)
				misplaced = fmt.Sprintf("%s (key %s hashes to partition %d)", s, key, p.Expected)
			}
			break
		}
		switch {
		case !matched:
			res.unmatched[s] = n
			res.unpartitioned += n
			res.unpartitionedSubjects++
			if len(res.unpartitionedSample) < 3 {
				res.unpartitionedSample = append(res.unpartitionedSample, s)
			}
		case misplaced != "":
			res.misplaced += n
			res.misplacedN++
			if len(res.misplacedList) < 3 {
				res.misplacedList = append(res.misplacedList, misplaced)
			}
		}
	}
	return res
}

// keepDesign drops the lanes of other designs, and findings about them.
// Lanes lanes did not create stay when they cover the design's partitions.
func (r *Report) keepDesign(design string, p *planner.Plan) {
	if design == "" && p != nil {
		design = p.Design.Name
	}
	if design == "" {
		return
	}
	var names []string
	for _, l := range r.Lanes {
		if l.Design == design || !l.Tagged && l.Design == "" {
			names = append(names, l.Name)
		}
	}
	keep := map[string]bool{}
	for _, n := range names {
		keep[n] = true
	}
	lanes := r.Lanes[:0]
	for _, l := range r.Lanes {
		if keep[l.Name] {
			lanes = append(lanes, l)
		}
	}
	r.Lanes = lanes
	findings := r.Findings[:0]
	for _, f := range r.Findings {
		if f.Lane == "" || keep[f.Lane] {
			findings = append(findings, f)
		}
	}
	r.Findings = findings
	if len(r.Lanes) == 0 {
		r.Findings = append(r.Findings, Finding{Severity: Critical, Code: "no_lanes", Message: fmt.Sprintf("no lanes of design %s on stream %s", design, r.Stream),
			Advice: "create them with lanes apply, or check --design and --stream"})
	}
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Severity != fs[j].Severity {
			return fs[i].Severity > fs[j].Severity
		}
		return fs[i].Lane < fs[j].Lane
	})
}
