package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/lanelist"
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
	rd := &reader{c: c, o: o}
	stream, info, err := rd.streamInfo(ctx)
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
			j.headsTimedOut = rd.heads(ctx, stream, r.Lanes, layouts)
		}()
	}
	placed := rd.placement(ctx, stream, info, layouts)
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
	r.Requests = int(rd.requests.Load())
	r.Time = time.Now()
	r.Summarize()
	return r, nil
}

type reader struct {
	c        *connect.Conn
	o        Options
	requests atomic.Int64
}

func (rd *reader) classify(ctx context.Context, err error) error {
	var ae *lanelist.APIError
	if errors.As(err, &ae) && ae.ErrCode == lanelist.ErrCodeStreamNotFound || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: %s (check --stream and the account)", ErrStreamNotFound, planner.Printable(rd.o.Stream, 255))
	}
	if errors.As(err, &ae) {
		if ae.Code == 503 && ae.ErrCode == 10008 { // no meta leader
			return connect.Unavailable(rd.c.Server, &jetstream.APIError{Code: ae.Code, ErrorCode: jetstream.ErrorCode(ae.ErrCode), Description: ae.Description})
		}
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
func (rd *reader) list(ctx context.Context) (*lanelist.Listing, error) {
	budget := rd.c.Timeout
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Duration(float64(budget)*listShare))
	listing, err := lanelist.List(lctx, rd.c, rd.o.Stream)
	cancel()
	if err == nil {
		rd.requests.Add(int64(listing.Requests))
		return listing, nil
	}
	var ce *connect.Error
	if ctx.Err() != nil || !errors.As(err, &ce) || ce.Kind != connect.KindTimeout {
		return nil, rd.classify(ctx, err)
	}
	return rd.listByName(ctx)
}

// listByName is list's slow path: the names come from the meta leader,
// which answers at once; the infos from each consumer's leader, 64 in
// flight, within what is left of the deadline. A consumer whose leader does
// not answer is missing; one whose leader answers with an error is offline.
func (rd *reader) listByName(ctx context.Context) (*lanelist.Listing, error) {
	ctx, release := rd.c.Guard(ctx) // a permissions violation fails at once
	defer release()
	names, err := rd.consumerNames(ctx)
	if err != nil {
		return nil, err
	}
	out := &lanelist.Listing{Offline: map[string]string{}}
	infos := make([]*jetstream.ConsumerInfo, len(names))
	problems := make([]string, len(names))
	sem := make(chan struct{}, DefaultConcurrency)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rd.requests.Add(1)
			infos[i], problems[i] = rd.consumerInfo(ctx, name)
		}()
	}
	wg.Wait()
	var denied *connect.Error
	if errors.As(context.Cause(ctx), &denied) {
		return nil, denied
	}
	for i, name := range names {
		switch {
		case infos[i] != nil:
			out.Consumers = append(out.Consumers, infos[i])
		case problems[i] == "":
			out.Missing = append(out.Missing, name)
		case problems[i] != "deleted":
			out.Offline[name] = problems[i]
		}
	}
	return out, nil
}

// consumerNames reads CONSUMER.NAMES, 1,024 a page.
func (rd *reader) consumerNames(ctx context.Context) ([]string, error) {
	var names []string
	for {
		var resp struct {
			Error *struct {
				Code        int    `json:"code"`
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
			Total     int      `json:"total"`
			Consumers []string `json:"consumers"`
		}
		if err := rd.request(ctx, "CONSUMER.NAMES."+rd.o.Stream, map[string]int{"offset": len(names)}, &resp); err != nil {
			return nil, rd.classify(ctx, err)
		}
		if resp.Error != nil {
			return nil, rd.classify(ctx, &lanelist.APIError{Code: resp.Error.Code, ErrCode: resp.Error.ErrCode, Description: resp.Error.Description})
		}
		names = append(names, resp.Consumers...)
		if len(resp.Consumers) == 0 || len(names) >= resp.Total {
			return names, nil
		}
	}
}

// consumerInfo asks one consumer's leader. It returns the info, or why not:
// "" when no answer came in time, "deleted" for a consumer gone since.
func (rd *reader) consumerInfo(ctx context.Context, name string) (*jetstream.ConsumerInfo, string) {
	var resp struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		jetstream.ConsumerInfo
	}
	if err := rd.request(ctx, "CONSUMER.INFO."+rd.o.Stream+"."+name, nil, &resp); err != nil {
		return nil, ""
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == 10014 { // consumer not found
			return nil, "deleted"
		}
		return nil, planner.Printable(resp.Error.Description, 200)
	}
	return &resp.ConsumerInfo, ""
}

// request sends one JetStream API request under ctx and decodes the answer.
func (rd *reader) request(ctx context.Context, api string, body any, out any) error {
	var data []byte
	if body != nil {
		data, _ = json.Marshal(body)
	}
	msg, err := rd.c.NC.RequestWithContext(ctx, rd.c.APIPrefix+api, data)
	if err != nil {
		return rd.c.Classify(ctx, err)
	}
	return json.Unmarshal(msg.Data, out)
}

// streamInfo is the one stream info request.
func (rd *reader) streamInfo(ctx context.Context) (jetstream.Stream, *jetstream.StreamInfo, error) {
	rctx, cancel := rd.c.Guard(ctx)
	defer cancel()
	rctx, cancelT := rd.c.Ctx(rctx)
	defer cancelT()
	rd.requests.Add(1)
	s, err := rd.c.JS.Stream(rctx, rd.o.Stream)
	if err != nil {
		return nil, nil, rd.classify(rctx, err)
	}
	return s, s.CachedInfo(), nil
}

// heads looks up the oldest unacknowledged message of every lane with a
// backlog: the first message after its ack floor on its filter. All lookups
// share one deadline, so 1,024 backlogged lanes cost one request timeout at
// worst. It returns how many lookups did not finish in time.
func (rd *reader) heads(ctx context.Context, stream jetstream.Stream, lanes []Lane, layouts []*layout) int {
	ctx, cancel := rd.c.Ctx(ctx)
	defer cancel()
	n := rd.o.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var timedOut atomic.Int64
	for i := range lanes {
		l := &lanes[i]
		if l.State != StateOK || l.Backlog == 0 || l.Filter == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rd.requests.Add(1)
			m, err := stream.GetMsg(ctx, l.AckFloorSeq+1, jetstream.WithGetMsgSubject(l.Filter))
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgNotFound) {
					timedOut.Add(1)
				}
				return
			}
			l.Head = &Head{Seq: m.Sequence, Subject: m.Subject, Time: m.Time, Key: storedKey(layouts, m.Subject)}
		}()
	}
	wg.Wait()
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
func (rd *reader) placement(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo, layouts []*layout) *placementResult {
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
	pages := max(1, (int(info.State.NumSubjects)+DefaultMaxSubjects-1)/DefaultMaxSubjects)
	rd.requests.Add(int64(pages))
	full, err := stream.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return &placementResult{failed: rd.classify(ctx, err).Error()}
	}
	return checkPlacement(full.State.Subjects, layouts)
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
