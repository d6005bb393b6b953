package health

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// Options say which stream and lanes to read and how much to look at.
type Options struct {
	Stream string
	// Design keeps only the lanes of this design ("" keeps every lane).
	// Stream-wide checks (gaps, placement) still see every consumer.
	Design string
	// Plan is the design file, when given: its layout is expected on the
	// stream, so a partition without a lane is a gap even with no lanes at all.
	Plan *planner.Plan
	// MaxSubjects bounds the placement check (messages on unpartitioned or
	// wrong-partition subjects): the stream's subject list is read only
	// when it has at most this many subjects. 0 means DefaultMaxSubjects;
	// a negative value skips the check.
	MaxSubjects int
	// SkipHeads skips looking up each backlogged lane's head message: no
	// lag age and no key names, but no request per lane either.
	SkipHeads bool
	// Concurrency is how many head lookups are in flight at once
	// (0 means DefaultConcurrency).
	Concurrency int
}

// Defaults for Options.
const (
	DefaultMaxSubjects = planner.MaxSubjects // one page of the server's subject list
	DefaultConcurrency = 64
)

// ErrStreamNotFound is returned when the stream does not exist.
var ErrStreamNotFound = errors.New("stream not found")

// Read reads the stream and its lanes and judges them. Requests: one
// stream info, the CONSUMER.LIST pages (256 lanes each), one message
// lookup per lane with a backlog (at most Concurrency at once), and the
// subject list when the placement check runs. The whole read has one
// deadline, the connection's timeout: in a cluster, lanes whose leader
// does not answer in time are named, not waited for.
func Read(ctx context.Context, c *connect.Conn, o Options) (*Report, error) {
	if o.Stream == "" {
		return nil, errors.New("no stream given")
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	rd := &reader{c: c, api: jsapi.New(c), o: o}
	info, err := rd.streamInfo(ctx)
	if err != nil {
		return nil, err
	}
	listing, err := rd.list(ctx)
	if err != nil {
		return nil, err
	}

	r := &Report{
		Stream:       o.Stream,
		LastSeq:      info.State.LastSeq,
		Messages:     info.State.Msgs,
		Subjects:     int(info.State.NumSubjects),
		MaxConsumers: info.Config.MaxConsumers,
		Consumers:    info.State.Consumers,
	}
	j := &judge{report: r}
	layouts := j.layouts(info, o.Plan, listing)
	cover := j.recognise(listing, layouts)
	// The head lookups and the subject list are independent: overlap them.
	var wg sync.WaitGroup
	if !o.SkipHeads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.headsTimedOut = rd.heads(ctx, info, r.Lanes, layouts)
		}()
	}
	placed := rd.placement(ctx, info, layouts)
	wg.Wait()
	if placed != nil && placed.failed != "" {
		j.add(Finding{Severity: Info, Code: "placement_unchecked",
			Message: "placement not checked: the stream's subject list did not arrive: " + placed.failed,
			Advice:  "run inspect again, or raise --timeout"})
		placed = nil
	}
	j.placement = placed
	j.judgeLanes()
	j.judgeStream(info, layouts, cover)
	r.keepDesign(o.Design, o.Plan)
	sortFindings(r.Findings)
	r.Requests = int(rd.api.Requests())
	r.Time = time.Now()
	r.Summarize()
	return r, nil
}

type reader struct {
	c   *connect.Conn
	api *jsapi.Client
	o   Options
}

func (rd *reader) classify(ctx context.Context, err error) error {
	if jsapi.IsStreamNotFound(err) {
		return fmt.Errorf("%w: %s (check --stream and the account)", ErrStreamNotFound, planner.Printable(rd.o.Stream, 255))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce // a cluster without a leader among them
	}
	if ae, ok := jsapi.As(err); ok {
		return fmt.Errorf("the server refused to list the consumers of %s: %s (err_code %d)", rd.o.Stream, planner.Printable(ae.Description, 200), ae.ErrCode)
	}
	return rd.c.Classify(ctx, err)
}

// listShare is the part of the deadline CONSUMER.LIST may take. In a
// cluster the server waits up to 4 s for every lane's leader before it
// answers; when that is more than the deadline allows, the rest of it goes
// to asking each lane on its own, so the lanes that answer are shown and
// the others named.
const listShare = 0.6

// list reads every consumer of the stream: one CONSUMER.LIST pass, or, when
// it does not answer within its share of the deadline, consumer names and
// one CONSUMER.INFO per consumer.
func (rd *reader) list(ctx context.Context) (*jsapi.Listing, error) {
	budget := rd.c.Timeout
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Duration(float64(budget)*listShare))
	listing, err := rd.api.List(lctx, rd.o.Stream)
	cancel()
	if err == nil {
		return listing, nil
	}
	var ce *connect.Error
	if ctx.Err() != nil || !errors.As(err, &ce) || ce.Kind != connect.KindTimeout {
		return nil, rd.classify(ctx, err)
	}
	// The names come from the meta leader, which answers at once; the
	// infos from each consumer's leader, within what is left of the deadline.
	listing, err = rd.api.ListEach(ctx, rd.o.Stream, DefaultConcurrency)
	if err != nil {
		return nil, rd.classify(ctx, err)
	}
	return listing, nil
}

// streamInfo is the one stream info request.
func (rd *reader) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	info, err := rd.api.StreamInfo(ctx, rd.o.Stream)
	if err != nil {
		return nil, rd.classify(ctx, err)
	}
	return info, nil
}

// heads looks up the oldest unacknowledged message of every lane with a
// backlog: the first message after its ack floor on its filter. All lookups
// share one deadline, so 1,024 backlogged lanes cost one request timeout at
// worst. It returns how many lookups did not finish in time.
func (rd *reader) heads(ctx context.Context, info *jetstream.StreamInfo, lanes []Lane, layouts []*layout) int {
	ctx, cancel := rd.c.Ctx(ctx)
	defer cancel()
	n := rd.o.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	var g errgroup.Group
	g.SetLimit(n)
	var timedOut atomic.Int64
	for i := range lanes {
		l := &lanes[i]
		if l.State != StateOK || l.Backlog == 0 || l.Filter == "" {
			continue
		}
		g.Go(func() error {
			m, err := rd.api.NextMsg(ctx, rd.o.Stream, l.AckFloorSeq+1, l.Filter, info.Config.AllowDirect)
			if err != nil {
				if !jsapi.IsMessageNotFound(err) {
					timedOut.Add(1)
				}
				return nil
			}
			l.Head = &Head{Seq: m.Seq, Subject: m.Subject, Time: m.Time, Key: storedKey(layouts, m.Subject)}
			return nil
		})
	}
	g.Wait()
	return int(timedOut.Load())
}

func storedKey(layouts []*layout, subject string) string {
	for _, l := range layouts {
		if k, ok := l.parsed.StoredKey(subject); ok {
			return k
		}
	}
	return ""
}

// placement reads the stream's subjects (when there are few enough) and
// counts messages stored outside every partition layout, or in a partition
// their key does not hash to: both were published around the mapping. A
// list that does not arrive in time leaves placement unchecked.
func (rd *reader) placement(ctx context.Context, info *jetstream.StreamInfo, layouts []*layout) *placementResult {
	limit := rd.o.MaxSubjects
	if limit == 0 {
		limit = DefaultMaxSubjects
	}
	if limit < 0 || len(layouts) == 0 || info.State.Msgs == 0 {
		return nil
	}
	if info.State.NumSubjects > uint64(limit) {
		return &placementResult{unchecked: int(info.State.NumSubjects), limit: limit}
	}
	subjects, err := rd.api.Subjects(ctx, rd.o.Stream, ">")
	if err != nil {
		return &placementResult{failed: rd.classify(ctx, err).Error()}
	}
	return checkPlacement(subjects, layouts)
}

// placementResult counts messages by where they are stored.
type placementResult struct {
	unpartitioned, misplaced           uint64 // messages
	unpartitionedSubjects, misplacedN  int    // subjects
	unpartitionedSample, misplacedList []string
	unchecked, limit                   int               // subjects, when there were too many to check
	failed                             string            // why the subject list could not be read
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
