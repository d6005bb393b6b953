package health

import (
	"fmt"

	"github.com/lanes-dev/lanes/planner"
)

// Rates fills each lane's delivered and acked rates from the change since
// prev, the report before it (watch mode). Deliveries count redeliveries
// too, as the consumer sequence does.
func Rates(prev, cur *Report) {
	if prev == nil || cur == nil {
		return
	}
	before := make(map[string]*Lane, len(prev.Lanes))
	for i := range prev.Lanes {
		before[prev.Lanes[i].Name] = &prev.Lanes[i]
	}
	cur.Interval = cur.Time.Sub(prev.Time)
	for i := range cur.Lanes {
		l := &cur.Lanes[i]
		p, ok := before[l.Name]
		if !ok || l.State != StateOK || p.State != StateOK {
			continue
		}
		// Each lane's figures carry the server's time: use it when both have it.
		dt := l.At.Sub(p.At).Seconds()
		if l.At.IsZero() || p.At.IsZero() || dt <= 0 {
			dt = cur.Interval.Seconds()
		}
		if dt <= 0 {
			continue
		}
		l.DeliveredRate = rate(p.DeliveredConsumer, l.DeliveredConsumer, dt)
		l.AckedRate = rate(p.AckFloorConsumer, l.AckFloorConsumer, dt)
	}
}

// rate is zero when a counter went backwards (the lane was recreated).
func rate(before, after uint64, seconds float64) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / seconds
}

// placementCodes are the findings of the placement check.
var placementCodes = map[string]bool{"misplaced": true, "unpartitioned": true, "retired": true, "placement_unchecked": true}

// CarryPlacement copies the placement findings of from (a read that ran
// the check) into to (a read that skipped it, MaxSubjects < 0): a watch
// reads the subject list once a minute, not every refresh.
func CarryPlacement(from, to *Report) {
	if from == nil || to == nil {
		return
	}
	for _, f := range from.Findings {
		if placementCodes[f.Code] {
			to.Findings = append(to.Findings, f)
		}
	}
	sortFindings(to.Findings)
	to.Summarize()
}

// KeyPlace is where one key's messages go under one layout.
type KeyPlace struct {
	Subject   string // as published
	Key       string
	Layout    Layout
	Partition int
	Stored    string   // the subject it is stored under
	Lanes     []string // the lanes that deliver it (one, unless there is an overlap)
}

// Locate answers "which lane holds this key" for a published subject, under
// every layout the report knows (two during a repartition: old messages
// drain from the old lane while new ones wait in the new one). An error
// says that the subject matches no layout.
func (r *Report) Locate(subject string) ([]KeyPlace, error) {
	var out []KeyPlace
	var sources []string
	for _, lay := range r.Layouts {
		parsed, err := planner.ParseLayout(lay.Source, lay.Destination)
		if err != nil {
			continue
		}
		sources = append(sources, lay.Source)
		p, ok := parsed.PartitionOf([]byte(subject))
		if !ok {
			continue
		}
		stored, _ := parsed.Transform(subject)
		kp := KeyPlace{Subject: subject, Key: parsed.Key([]byte(subject)), Layout: lay, Partition: p, Stored: stored}
		filter := parsed.Filter(p)
		for _, l := range r.Lanes {
			if l.Filter == filter || l.Filter == "" && l.Partitions == lay.Partitions && l.Partition == p {
				kp.Lanes = append(kp.Lanes, l.Name)
			}
		}
		out = append(out, kp)
	}
	if len(out) == 0 {
		if len(sources) == 0 {
			return nil, fmt.Errorf("stream %s has no partition mapping inspect can read: give the design with -f", r.Stream)
		}
		return nil, fmt.Errorf("%q does not match the mapping source %v of stream %s", subject, sources, r.Stream)
	}
	return out, nil
}
