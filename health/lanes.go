package health

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// judge builds a report: it recognises lanes among the consumers and
// records findings.
type judge struct {
	report        *Report
	placement     *placementResult
	headsTimedOut int
	// mismatched are lanes whose metadata names another partition than their filter.
	mismatched map[string]int
	// lanes indexes the report's lanes by name, once recognised.
	lanes map[string]*Lane
	// design is the design inspected (Options.Design, or the design
	// file's), "" for every lane on the stream.
	design string
	// afterRetirement is Snapshot.AfterRetirement.
	afterRetirement map[string]jsapi.Msg
}

func (j *judge) add(f Finding) { j.report.Findings = append(j.report.Findings, f) }

// layout is a parsed mapping with where it came from.
type layout struct {
	Layout
	parsed *planner.Layout
}

// layouts collects every partition mapping the stream tells of: the design
// file's, the stream's subject transform, and the ones lanes carry in their
// metadata (older generations during a repartition). An unusable stream
// mapping becomes a finding. Current are the mappings in force, those
// new messages go through (see inForce).
func (j *judge) layouts(info *jetstream.StreamInfo, p *planner.Plan, listing *jsapi.Listing) []*layout {
	var out []*layout
	add := func(source, dest, origin string, current bool) (*layout, error) {
		for _, l := range out {
			if l.Source == source && l.Destination == dest {
				l.Current = l.Current || current
				return l, nil
			}
		}
		parsed, err := planner.ParseLayout(source, dest)
		if err != nil {
			return nil, err
		}
		l := &layout{Layout: Layout{Source: source, Destination: dest, Partitions: parsed.Partitions, Origin: origin, Current: current}, parsed: parsed}
		out = append(out, l)
		return l, nil
	}
	var design *layout
	if p != nil {
		design, _ = add(p.Mapping.Source, p.Mapping.Destination, "design", false)
	}
	var stream *layout
	if t := info.Config.SubjectTransform; t != nil && isPartitionMapping(t.Destination) {
		source := t.Source
		if source == "" && len(info.Config.Subjects) == 1 {
			source = info.Config.Subjects[0]
		}
		var err error
		if stream, err = add(source, t.Destination, "stream", true); err != nil {
			j.add(mappingFinding(source, t.Destination, err))
		}
	}
	own := map[*layout]bool{} // the layouts of the design file's lanes
	for _, ci := range listing.Consumers {
		if tag, ok := planner.TagOf(ci.Config.Metadata); ok && tag.Source != "" && tag.Destination != "" {
			l, err := add(tag.Source, tag.Destination, "lanes", false) // an unusable one only loses key names
			if err == nil && p != nil && tag.Design == p.Design.Name {
				own[l] = true
			}
		}
	}
	if design != nil {
		j.inForce(design, stream, own, p.Design.Mapping)
	}
	for _, l := range out {
		j.report.Layouts = append(j.report.Layouts, l.Layout)
	}
	return out
}

// inForce decides whether the design file's mapping is the one new
// messages go through, or the server has another (the file is older than
// the server: lanes apply --partitions 16 while the file still says 8).
// With mapping: stream, the stream's transform is in force when it has
// one. With mapping: account the client cannot read the mapping: the
// design's lanes say which it is, unless some of them are on the file's
// (a repartition in progress) or there are none. Gaps are judged against
// the mappings in force; the file's other mapping is a drift warning.
func (j *judge) inForce(design, stream *layout, own map[*layout]bool, mapping string) {
	switch {
	case design == stream:
		// the same mapping: in force already
	case mapping != planner.MappingAccount:
		design.Current = stream == nil
	case own[design] || len(own) == 0:
		design.Current = true
	default:
		for l := range own {
			l.Current = true
		}
	}
}

func isPartitionMapping(dest string) bool {
	d := strings.ToLower(dest)
	return strings.Contains(d, "partition(") || strings.Contains(d, "random(")
}

func mappingFinding(source, dest string, err error) Finding {
	if strings.Contains(strings.ToLower(dest), "random(") {
		return Finding{Severity: Critical, Code: "nondeterministic_mapping",
			Message: fmt.Sprintf("the stream's subject transform %s -> %s is not deterministic: one key lands in different partitions", source, dest),
			Advice:  "replace random() with partition(n, key tokens), e.g. with lanes apply; messages already stored stay where they are"}
	}
	return Finding{Severity: Warning, Code: "unusable_mapping",
		Message: fmt.Sprintf("the stream's subject transform %s -> %s cannot carry lanes: %v", source, dest, err),
		Advice:  "use a whole-token {{partition(n, key tokens)}} and keep every key token, as lanes plan prints it"}
}

// coverage records which consumers cover each partition of each layout.
type coverage map[*layout]map[int][]string

func (c coverage) add(l *layout, partition int, name string) {
	if c[l] == nil {
		c[l] = map[int][]string{}
	}
	c[l][partition] = append(c[l][partition], name)
}

// recognise turns consumers into lanes: by their metadata, or, for lanes
// lanes did not create, by a filter that is exactly one partition of a
// known layout. Other consumers that receive partitioned messages are
// findings. Lanes the server could not report are rows too, so a missing
// lane is never mistaken for a gap.
func (j *judge) recognise(listing *jsapi.Listing, layouts []*layout) coverage {
	cover := coverage{}
	j.mismatched = map[string]int{}
	for _, ci := range listing.Consumers {
		if ci.Name == "" {
			continue // an offline consumer placed by hand; it is named in Missing
		}
		lane, l, ok := j.laneOf(ci, layouts)
		if !ok {
			// Not a lane: it never fills a gap, but it may compete with lanes.
			if f, ok := alsoCovers(ci, layouts); ok {
				j.add(f)
			}
			continue
		}
		j.report.Lanes = append(j.report.Lanes, lane)
		if l != nil {
			cover.add(l, lane.Partition, lane.Name)
		}
	}
	for _, name := range listing.Missing {
		j.unavailable(name, StateMissing, "", layouts, cover)
	}
	for name, reason := range listing.Offline {
		if !contains(listing.Missing, name) {
			j.unavailable(name, StateOffline, planner.Printable(reason, 200), layouts, cover)
		}
	}
	sort.Slice(j.report.Lanes, func(a, b int) bool {
		x, y := j.report.Lanes[a], j.report.Lanes[b]
		if x.Design != y.Design {
			return x.Design < y.Design
		}
		if x.Partitions != y.Partitions {
			return x.Partitions < y.Partitions
		}
		if x.Partition != y.Partition {
			return x.Partition < y.Partition
		}
		return x.Name < y.Name
	})
	j.lanes = make(map[string]*Lane, len(j.report.Lanes))
	for i := range j.report.Lanes {
		j.lanes[j.report.Lanes[i].Name] = &j.report.Lanes[i]
	}
	return cover
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// laneOf recognises a lane and the layout it belongs to (nil when no
// layout is known, e.g. account mapping without metadata or design file).
func (j *judge) laneOf(ci *jetstream.ConsumerInfo, layouts []*layout) (Lane, *layout, bool) {
	filter, single := singleFilter(ci.Config)
	tag, tagged := planner.TagOf(ci.Config.Metadata)
	// Metadata is anyone's to write: a partition count beyond the bound is
	// not a lane's, and would have every per-partition check loop on it.
	tagged = tagged && planner.CheckPartitions(tag.Partitions) == nil
	if tagged {
		var home *layout
		for _, l := range layouts {
			if l.Partitions != tag.Partitions {
				continue
			}
			if tag.Source != "" && (l.Source != tag.Source || l.Destination != tag.Destination) {
				continue
			}
			if p, ok := l.parsed.PartitionOfFilter(filter); ok && single {
				home = l
				if p != tag.Partition {
					j.mismatched[ci.Name] = p
				}
				break
			}
		}
		lane := newLane(ci, filter, tag.Design, tag.Partition, tag.Partitions, true)
		lane.KeysInFlight = tag.KeysInFlight
		return lane, home, true
	}
	// A push consumer is not a lane (lanes are pull consumers: lanes work
	// pulls, lanes apply creates pull consumers), whatever its filter: it
	// is judged as a consumer that receives lane partitions.
	if !single || ci.Config.DeliverSubject != "" {
		return Lane{}, nil, false
	}
	for _, l := range layouts {
		if p, ok := l.parsed.PartitionOfFilter(filter); ok {
			return newLane(ci, filter, "", p, l.Partitions, false), l, true
		}
	}
	return Lane{}, nil, false
}

func singleFilter(c jetstream.ConsumerConfig) (string, bool) {
	switch {
	case c.FilterSubject != "":
		return c.FilterSubject, true
	case len(c.FilterSubjects) == 1:
		return c.FilterSubjects[0], true
	}
	return strings.Join(c.FilterSubjects, ","), false
}

// newLane copies the figures of one consumer info.
func newLane(ci *jetstream.ConsumerInfo, filter, design string, partition, partitions int, tagged bool) Lane {
	c := ci.Config
	l := Lane{
		Name: ci.Name, Design: design, Partition: partition, Partitions: partitions, Filter: filter, Tagged: tagged, State: StateOK,
		Pending: ci.NumPending, AckPending: ci.NumAckPending, MaxAckPending: c.MaxAckPending,
		Redelivered: ci.NumRedelivered, Waiting: ci.NumWaiting,
		DeliveredSeq: ci.Delivered.Stream, AckFloorSeq: ci.AckFloor.Stream,
		DeliveredConsumer: ci.Delivered.Consumer, AckFloorConsumer: ci.AckFloor.Consumer,
		At:        ci.TimeStamp,
		AckPolicy: ackPolicyName(c.AckPolicy), AckWait: c.AckWait, MaxDeliver: c.MaxDeliver,
		Durable: c.Durable != "", InactiveThreshold: c.InactiveThreshold,
		Paused: ci.Paused, PauseRemaining: ci.PauseRemaining, Held: c.Metadata[planner.MetaHeld],
	}
	l.Backlog = l.Pending + uint64(max(l.AckPending, 0))
	if ci.Delivered.Last != nil {
		l.LastDelivery = *ci.Delivered.Last
	}
	if ci.AckFloor.Last != nil {
		l.LastAck = *ci.AckFloor.Last
	}
	if c.PriorityPolicy == jetstream.PriorityPolicyPinned {
		l.PinnedTTL = c.PinnedTTL
		if l.PinnedTTL == 0 {
			l.PinnedTTL = planner.DefaultPinnedTTL
		}
	}
	if len(ci.PriorityGroups) > 0 && ci.PriorityGroups[0].PinnedClientID != "" {
		l.PinnedClient, l.PinnedSince = ci.PriorityGroups[0].PinnedClientID, ci.PriorityGroups[0].PinnedTS
	}
	if ci.Cluster != nil {
		l.Leader = ci.Cluster.Leader
	}
	// With one message out at a time, every delivery since the ack floor
	// was a delivery of the head message.
	if l.MaxAckPending == 1 && l.AckPending == 1 && l.DeliveredConsumer > l.AckFloorConsumer {
		l.HeadDeliveries = int(l.DeliveredConsumer - l.AckFloorConsumer)
	}
	return l
}

// ackPolicyName is the policy as the JetStream API writes it: none, all, explicit.
func ackPolicyName(p jetstream.AckPolicy) string {
	b, err := p.MarshalJSON()
	if err != nil {
		return p.String()
	}
	return strings.Trim(string(b), `"`)
}

var laneName = regexp.MustCompile(`^(.+)-n([0-9]+)-([0-9]+)$`)

// unavailable adds a row for a lane the server named but did not report.
// Its design and partition come from its name, when lanes named it.
func (j *judge) unavailable(name string, state State, reason string, layouts []*layout, cover coverage) {
	lane := Lane{Name: name, State: state, Reason: reason, Partition: -1}
	if m := laneName.FindStringSubmatch(name); m != nil {
		n, _ := strconv.Atoi(m[2])
		p, _ := strconv.Atoi(m[3])
		if planner.CheckPartitions(n) == nil && p < n {
			lane.Design, lane.Partitions, lane.Partition, lane.Tagged = m[1], n, p, true
			for _, l := range layouts {
				if l.Partitions == n {
					cover.add(l, p, name)
					lane.Filter = l.parsed.Filter(p)
					break
				}
			}
		}
	}
	j.report.Lanes = append(j.report.Lanes, lane)
	what := "is unavailable: the server could not get its state (its leader is down or did not answer in time)"
	if state == StateOffline {
		what = "is offline: " + reason
	}
	j.add(Finding{Severity: Critical, Code: string(state), Lane: name,
		Message: fmt.Sprintf("lane %s %s; its figures are unknown", name, what),
		Advice:  "check the cluster (nats server report jetstream): the nodes holding this lane must be up for it to deliver"})
}

type layoutPartition struct {
	l *layout
	p int
}

// coveredPartitions lists the partitions a consumer that is not a lane
// receives messages of.
func coveredPartitions(ci *jetstream.ConsumerInfo, layouts []*layout) []layoutPartition {
	filters := filtersOf(ci.Config)
	var out []layoutPartition
	for _, l := range layouts {
		for p := 0; p < l.Partitions; p++ {
			lf := l.parsed.Filter(p)
			for _, f := range filters {
				if collide(f, lf) {
					out = append(out, layoutPartition{l, p})
					break
				}
			}
		}
	}
	return out
}

func filtersOf(c jetstream.ConsumerConfig) []string {
	switch {
	case c.FilterSubject != "":
		return []string{c.FilterSubject}
	case len(c.FilterSubjects) > 0:
		return c.FilterSubjects
	}
	return []string{">"}
}

// alsoCovers judges a consumer that is not a lane but receives messages of
// lane partitions: a catch-all (archive, audit) is worth knowing; one that
// takes some partitions competes with their lanes.
func alsoCovers(ci *jetstream.ConsumerInfo, layouts []*layout) (Finding, bool) {
	covered := coveredPartitions(ci, layouts)
	if len(covered) == 0 {
		return Finding{}, false
	}
	total := 0
	for _, l := range layouts {
		total += l.Partitions
	}
	filter := strings.Join(filtersOf(ci.Config), ",")
	kind := "consumer"
	if ci.Config.DeliverSubject != "" {
		kind = "push consumer"
	}
	if len(covered) == total {
		return Finding{Severity: Info, Code: "catch_all", Lane: ci.Name,
			Message: fmt.Sprintf("%s %s (filter %s) receives the messages of every lane", kind, ci.Name, filter),
			Advice:  "fine for an archive or audit consumer; if workers process from it, keys are handled twice and out of lane order"}, true
	}
	var parts []int
	for _, lp := range covered {
		parts = append(parts, lp.p)
	}
	return Finding{Severity: Critical, Code: "overlap", Lane: ci.Name,
		Message: fmt.Sprintf("%s %s (filter %s) also receives the messages of partition(s) %s: a partition's messages must go through its lane only", kind, ci.Name, filter, ranges(parts)),
		Advice:  "delete this consumer or narrow its filter; give each partition one lane (a pull consumer with one filter and max ack pending 1)"}, true
}

// collide reports whether two subject filters can match a common subject.
func collide(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i < len(at) && at[i] == ">", i < len(bt) && bt[i] == ">":
			return true
		case i == len(at) || i == len(bt):
			return false
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

// ranges writes sorted partitions compactly: 0-3, 7, 9-10.
func ranges(ps []int) string {
	ps = append([]int(nil), ps...)
	sort.Ints(ps)
	var b strings.Builder
	for i := 0; i < len(ps); {
		k := i
		for k+1 < len(ps) && ps[k+1] <= ps[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if ps[k] == ps[i] {
			fmt.Fprintf(&b, "%d", ps[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ps[i], ps[k])
		}
		i = k + 1
	}
	return b.String()
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Truncate(time.Minute).String()
	case d >= time.Second:
		return d.Truncate(time.Second).String()
	}
	return d.Truncate(time.Millisecond).String()
}
