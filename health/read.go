package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// Options say which stream and lanes to read, how much to look at, and
// what to judge them against.
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
	// Key is a published subject: Inspect answers where it goes and keeps
	// only the lanes that hold it (Report.ForKey).
	Key string
}

// Defaults for Options.
const (
	DefaultMaxSubjects = planner.MaxSubjects // one page of the server's subject list
	DefaultConcurrency = 64
)

func (o Options) maxSubjects() int {
	if o.MaxSubjects == 0 {
		return DefaultMaxSubjects
	}
	return o.MaxSubjects
}

// ErrStreamNotFound is returned when the stream does not exist.
var ErrStreamNotFound = errors.New("stream not found")

// Snapshot is what Read got from the server, as it answered, nothing
// judged: Judge turns it into a Report.
type Snapshot struct {
	Stream    string
	Info      *jetstream.StreamInfo // the stream's config and state
	Consumers *jsapi.Listing        // every consumer; those a cluster could not report are named
	// Heads are the oldest unacknowledged message of each backlogged lane,
	// by lane name (see Options.SkipHeads); HeadsFailed lookups did not
	// finish in time.
	Heads       map[string]jsapi.Msg
	HeadsFailed int
	// Subjects counts the stored messages per subject, for the placement
	// check; nil when it was not read. SubjectsFailed says why the list
	// did not arrive.
	Subjects       map[string]uint64
	SubjectsFailed string
	// AfterRetirement is, by generation record key
	// (planner.GenerationKey), the first message stored under a retired
	// generation's subjects after its retirement, which no lane processed
	// (read with the subject list); a generation without one is absent,
	// as is one whose lookup did not finish.
	AfterRetirement map[string]jsapi.Msg
	// Serving is what lanes work's membership bucket says, by design (a
	// design with no workers ever has an empty one); WorkersFailed says
	// why it could not be read, and who serves the lanes is then unknown.
	Serving       map[string]*membership.Serving
	WorkersFailed string
	// Parked counts the messages on each dead-letter subject the workers name.
	Parked   map[string]Parked
	Requests int       // API requests the read took (the membership's are not counted)
	Time     time.Time // when the read finished (client clock)
}

// Inspect reads the stream's lanes and judges them: Judge(Read(...)),
// kept to o.Key's lanes when it is given.
func Inspect(ctx context.Context, c *connect.Conn, o Options) (*Report, error) {
	s, err := Read(ctx, c, o)
	if err != nil {
		return nil, err
	}
	r := Judge(s, o)
	if o.Key == "" {
		return r, nil
	}
	return r.ForKey(o.Key)
}

// Read reads the stream and its lanes. Requests: one stream info, the
// CONSUMER.LIST pages (256 lanes each), one message lookup per lane with
// a backlog (at most Concurrency at once), and the subject list when the
// placement check runs; then lanes work's membership bucket for the
// designs of the lanes (who serves each lane, what was parked). The whole
// read has one deadline, the connection's timeout: in a cluster, lanes
// whose leader does not answer in time are named, not waited for, and a
// bucket that does not answer is left unknown.
func Read(ctx context.Context, c *connect.Conn, o Options) (*Snapshot, error) {
	if o.Stream == "" {
		return nil, errors.New("no stream given")
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	s, err := readLanes(ctx, c, o)
	if err != nil {
		return nil, err
	}
	// Who serves the lanes comes last, with what is left of the deadline
	// and under its own permission guard: a bucket the user may not read,
	// or one that does not answer, leaves it unknown, not the report.
	w := readWorkers(ctx, c, o.Stream, designsOf(s, o))
	s.Serving, s.Parked, s.WorkersFailed = w.serving, w.parked, w.failed
	s.Time = time.Now()
	return s, nil
}

// readLanes reads the stream, its consumers, the head messages and the
// subject list, under one permission guard.
func readLanes(ctx context.Context, c *connect.Conn, o Options) (*Snapshot, error) {
	rd := &reader{c: c, api: jsapi.New(c), o: o}
	ctx, release := rd.api.Guard(ctx) // one permission guard for every request
	defer release()
	s := &Snapshot{Stream: o.Stream}
	var err error
	if s.Info, err = rd.streamInfo(ctx); err != nil {
		return nil, err
	}
	if s.Consumers, err = rd.list(ctx); err != nil {
		return nil, err
	}
	// What to look at next depends on which consumers are lanes and which
	// layouts the stream has: the judge's own (pure) view of them.
	heads, layouts := survey(s, o)
	// The head lookups and the subject list are independent: overlap them.
	var g errgroup.Group
	if !o.SkipHeads {
		g.Go(func() error {
			s.Heads, s.HeadsFailed = rd.heads(ctx, s.Info, heads)
			return nil
		})
	}
	if wantSubjects(s.Info, o, layouts) {
		g.Go(func() error {
			subjects, err := rd.api.Subjects(ctx, o.Stream, ">")
			if err != nil {
				s.SubjectsFailed = rd.classify(ctx, err).Error()
				return nil
			}
			s.Subjects = subjects
			return nil
		})
		g.Go(func() error {
			s.AfterRetirement = rd.afterRetirement(ctx, s.Info)
			return nil
		})
	}
	g.Wait()
	s.Requests = int(rd.api.Requests())
	return s, nil
}

// wantSubjects: the placement check needs the subject list, and it is
// small enough to read.
func wantSubjects(info *jetstream.StreamInfo, o Options, layouts []*layout) bool {
	limit := o.maxSubjects()
	return limit >= 0 && len(layouts) > 0 && info.State.Msgs > 0 && info.State.NumSubjects <= uint64(limit)
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

// afterRetirement looks up, for each generation lanes apply retired (the
// stream's metadata records it), the first message stored under its
// subjects after the retirement: one request per retired generation.
func (rd *reader) afterRetirement(ctx context.Context, info *jetstream.StreamInfo) map[string]jsapi.Msg {
	ctx, cancel := rd.c.Ctx(ctx)
	defer cancel()
	var mu sync.Mutex
	found := map[string]jsapi.Msg{}
	var g errgroup.Group
	for design, recs := range planner.Generations(info.Config.Metadata) {
		for n, rec := range recs {
			if !rec.Retired() || rec.Subjects == "" {
				continue
			}
			g.Go(func() error {
				m, err := rd.api.NextMsg(ctx, rd.o.Stream, rec.RetiredSeq+1, rec.Subjects, info.Config.AllowDirect)
				if err == nil {
					mu.Lock()
					found[planner.GenerationKey(design, n)] = *m
					mu.Unlock()
				}
				return nil
			})
		}
	}
	g.Wait()
	return found
}

// heads looks up the oldest unacknowledged message of every lane with a
// backlog: the first message after its ack floor on its filter. All lookups
// share one deadline, so 1,024 backlogged lanes cost one request timeout at
// worst. It returns the messages found, by lane, and how many lookups did
// not finish in time.
func (rd *reader) heads(ctx context.Context, info *jetstream.StreamInfo, lanes []headLookup) (map[string]jsapi.Msg, int) {
	ctx, cancel := rd.c.Ctx(ctx)
	defer cancel()
	n := rd.o.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	found := make([]*jsapi.Msg, len(lanes))
	var g errgroup.Group
	g.SetLimit(n)
	var failed atomic.Int64
	for i, l := range lanes {
		g.Go(func() error {
			m, err := rd.api.NextMsg(ctx, rd.o.Stream, l.from, l.filter, info.Config.AllowDirect)
			switch {
			case err == nil:
				found[i] = m
			case !jsapi.IsMessageNotFound(err):
				failed.Add(1)
			}
			return nil
		})
	}
	g.Wait()
	heads := make(map[string]jsapi.Msg, len(lanes))
	for i, m := range found {
		if m != nil {
			heads[lanes[i].lane] = *m
		}
	}
	return heads, int(failed.Load())
}
