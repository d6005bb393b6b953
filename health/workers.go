package health

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// Server is the lanes work instance that serves a lane, as the membership
// bucket records it.
type Server struct {
	Instance string
	Since    time.Time // when it took the lane
	// Gone: the instance is no longer a member; nobody has taken the lane
	// since. Expired says its lease ran out (it died or was cut off)
	// rather than it leaving on a stop; GoneAt is when (zero: forgotten,
	// the bucket remembers departures for an hour).
	Gone    bool
	Expired bool
	GoneAt  time.Time
	// Released: the instance handed the lane over (a stop, or a
	// rebalance that has not reached the next owner yet); HandingOver:
	// and it is still a member, so the next owner takes it in a moment.
	Released    bool
	HandingOver bool
	// Running is a message the instance has run far longer than the
	// lane's usual processing time (it records none that run normally).
	Running *membership.InFlight
	// Outage: the instance cannot run its handler at all (a missing
	// program, a refused connection), and the lane's message waits.
	Outage *membership.Outage
	// Window: a key-parallel lane's window as the instance recorded it
	// (Lane.Window gives it only while it is the live owner's).
	Window *membership.Window
}

// Workers is what the membership bucket says about one design's workers.
type Workers struct {
	Design string
	Live   []membership.Member
	Gone   []membership.Member // departures of the last hour
	Parked []Parked            // per dead-letter subject its instances name
	// Quarantined are the keys lanes work quarantined (--on-poison
	// quarantine), by key, each with its first failure.
	Quarantined []membership.Quarantine
}

// Parked counts the messages parked on a dead-letter subject
// (lanes work --on-poison park --dead-letter SUBJECT).
type Parked struct {
	Subject string
	Stream  string // the stream that stores it; "" when none does
	Count   uint64
	Err     string // why it could not be counted
}

// workersRead is what Read got from the membership bucket.
type workersRead struct {
	serving map[string]*membership.Serving // by design
	parked  map[string]Parked              // by dead-letter subject
	failed  string
}

// designsOf lists the designs whose workers inspect asks about: the
// design asked for, else every design the lanes' metadata names.
func designsOf(s *Snapshot, o Options) []string {
	if o.Design != "" {
		return []string{o.Design}
	}
	if o.Plan != nil {
		return []string{o.Plan.Design.Name}
	}
	seen := map[string]bool{}
	var out []string
	for _, ci := range s.Consumers.Consumers {
		if tag, ok := planner.TagOf(ci.Config.Metadata); ok && tag.Design != "" && !seen[tag.Design] {
			seen[tag.Design] = true
			out = append(out, tag.Design)
		}
	}
	sort.Strings(out)
	return out
}

// readWorkers reads lanes work's membership bucket for each design, then
// counts the messages on the dead-letter subjects its instances name. It
// runs after the lanes' read, under its own permission guard: a user
// without access to the bucket (or a bucket that does not answer) leaves
// who serves the lanes unknown, never the rest of the report. A missing
// bucket (no worker ever ran) is no error: nobody serves anything.
func readWorkers(ctx context.Context, c *connect.Conn, stream string, designs []string) workersRead {
	out := workersRead{serving: map[string]*membership.Serving{}, parked: map[string]Parked{}}
	if len(designs) == 0 || c.JS == nil {
		return out
	}
	ctx, release := c.Guard(ctx)
	defer release()
	var mu sync.Mutex
	var g errgroup.Group
	for _, d := range designs {
		g.Go(func() error {
			sv, err := membership.ReadServing(ctx, c.JS, stream, d)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if out.failed == "" {
					out.failed = workersError(ctx, c, err)
				}
				return nil
			}
			out.serving[d] = sv
			return nil
		})
	}
	g.Wait()
	subjects := map[string]bool{}
	for _, sv := range out.serving {
		for _, m := range sv.Members {
			if m.DeadLetter != "" {
				subjects[m.DeadLetter] = true
			}
		}
		for _, l := range sv.Lanes {
			if l.DeadLetter != "" {
				subjects[l.DeadLetter] = true
			}
		}
	}
	for subject := range subjects {
		g.Go(func() error {
			n, stream, _, err := membership.CountParked(ctx, jsapi.New(c), subject)
			p := Parked{Subject: subject, Stream: stream, Count: n}
			if err != nil {
				p.Err = workersError(ctx, c, err)
			}
			mu.Lock()
			out.parked[subject] = p
			mu.Unlock()
			return nil
		})
	}
	g.Wait()
	return out
}

// workersError says why the bucket could not be read, in one line.
func workersError(ctx context.Context, c *connect.Conn, err error) string {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		err = cause // the guard's permission error says which subject
	} else if ctx.Err() != nil {
		return fmt.Sprintf("no answer from bucket %s within the deadline (--timeout)", membership.Bucket)
	}
	return planner.Printable(c.Classify(ctx, err).Error(), 300)
}

// attachWorkers puts on each lane the instance that serves it, and on the
// report each design's instances and parked messages. Pure: it reads only
// the snapshot.
func (j *judge) attachWorkers(s *Snapshot) {
	r := j.report
	r.WorkersUnknown = s.WorkersFailed
	designs := make([]string, 0, len(s.Serving))
	for d := range s.Serving {
		designs = append(designs, d)
	}
	sort.Strings(designs)
	for _, d := range designs {
		sv := s.Serving[d]
		w := Workers{Design: d}
		gone := map[string]membership.Member{}
		subjects := map[string]bool{}
		live := map[string]bool{}
		for _, m := range sv.Members {
			w.Live = append(w.Live, m)
			live[m.Instance] = true
			subjects[m.DeadLetter] = true
		}
		for _, m := range sv.Gone {
			w.Gone = append(w.Gone, m)
			gone[m.Instance] = m
		}
		for _, ls := range sv.Lanes {
			subjects[ls.DeadLetter] = true
		}
		delete(subjects, "")
		for subject := range subjects {
			if p, ok := s.Parked[subject]; ok {
				w.Parked = append(w.Parked, p)
			}
		}
		sort.Slice(w.Parked, func(a, b int) bool { return w.Parked[a].Subject < w.Parked[b].Subject })
		for _, q := range sv.Quarantined {
			w.Quarantined = append(w.Quarantined, q)
		}
		sort.Slice(w.Quarantined, func(a, b int) bool { return w.Quarantined[a].Key < w.Quarantined[b].Key })
		r.Workers = append(r.Workers, w)
		for i := range r.Lanes {
			l := &r.Lanes[i]
			if p, ok := sv.Pauses[l.Name]; ok && l.Paused && l.Design == d {
				l.PausedBy = &p
			}
			ls, ok := sv.Lanes[l.Name]
			if l.Design != d || !ok {
				continue
			}
			l.Server = &Server{Instance: ls.Instance, Since: ls.Since, Gone: ls.Gone, Released: ls.Released,
				HandingOver: ls.Released && live[ls.Instance], Running: ls.InFlight, Outage: ls.Outage, Window: ls.Window}
			if g, ok := gone[ls.Instance]; ok && ls.Gone {
				l.Server.Expired, l.Server.GoneAt = g.Expired, g.Renewed
			}
		}
	}
}

// WorkersOf returns the design's workers, or nil when the bucket was not read for it.
func (r *Report) WorkersOf(design string) *Workers {
	for i := range r.Workers {
		if r.Workers[i].Design == design {
			return &r.Workers[i]
		}
	}
	return nil
}
