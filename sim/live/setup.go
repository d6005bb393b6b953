package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// subjectRoot is the first token of every subject a live run uses.
const subjectRoot = "lanes_sim"

// lane is one consumer of a strategy run and the workers that pull from it.
type lane struct {
	index   int // the lane number the Recorder sees
	name    string
	workers int
	group   string // priority group for pinned lanes, else empty
}

// sandbox is a strategy's own copy of the design: its own stream name and
// its subjects under a unique prefix, so it can neither touch nor overlap
// anything already on the server.
type sandbox struct {
	plan   *planner.Plan // the design re-planned inside the sandbox
	prefix string        // prepended to every published subject
	stream string
	// buckets are the KV buckets the strategy's workers made (named after
	// the stream), removed with it.
	buckets []string
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails on supported platforms
	return hex.EncodeToString(b)
}

// newSandbox re-plans the design with its subjects under
// lanes_sim.<id>.<strategy> and a stream named LANES_SIM_<ID>_<STRATEGY>.
// The mapping always lives in the stream (an account mapping cannot be
// installed through the JetStream API); it partitions exactly the same way.
func newSandbox(p *planner.Plan, id, strategy string, ackWait time.Duration, singleServer bool) (*sandbox, error) {
	prefix := strings.Join([]string{subjectRoot, id, strategy}, ".")
	d := p.Design
	d.Origin = maps.Clone(d.Origin) // SetOrigin below must not change the caller's plan
	d.Subject = prefix + "." + d.Subject
	switch {
	case d.Destination != "":
		d.Destination = planner.Destination(prefix + "." + string(d.Destination))
	case d.Prefix != "":
		d.Prefix = prefix + "." + d.Prefix
	}
	d.Mapping = planner.MappingStream
	d.Stream.Name = strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(subjectRoot + "_" + id + "_" + strategy))
	if ackWait > 0 {
		d.Lane.AckWait = planner.Duration(ackWait)
		d.SetOrigin("lane.ack_wait", "--ack-wait")
	}
	if singleServer {
		// The embedded server is one node: replicas above 1 cannot be placed.
		d.Stream.Replicas, d.Lane.Replicas = 1, 0
	}
	sp, err := planner.New(d)
	if err != nil {
		return nil, fmt.Errorf("live simulation: %w", err)
	}
	return &sandbox{plan: sp, prefix: prefix, stream: sp.Stream.Name}, nil
}

// consumers are the definitions a strategy runs on, and the lanes that pull
// from them, as the strategy's shape says: the plan's lanes, or one shared
// consumer made from lane 0's definition without its filter, lane tags or
// priority group.
func (s *sandbox) consumers(st strategy.Strategy, p strategy.Params) ([]planner.ConsumerConfig, []lane) {
	sh := st.Shape(p)
	if sh.ByPartition {
		var defs []planner.ConsumerConfig
		var lanes []lane
		for i, c := range s.plan.Consumers {
			// Every worker's pull must be able to wait on the lane.
			c.MaxWaiting = max(c.MaxWaiting, sh.WorkersEach)
			c.MaxAckPending = sh.MaxAckPending
			group := ""
			if sh.Pinned && len(c.PriorityGroups) > 0 {
				group = c.PriorityGroups[0]
			}
			defs = append(defs, c)
			lanes = append(lanes, lane{index: i, name: c.Durable, workers: sh.WorkersEach, group: group})
		}
		return defs, lanes
	}
	c := s.plan.Consumers[0]
	c.Durable = s.plan.Design.Name + "-" + st.Name
	c.Description = fmt.Sprintf("lanes simulate: %s strategy, one consumer shared by %d workers", st.Name, sh.WorkersEach)
	c.FilterSubject = ""
	c.MaxAckPending = sh.MaxAckPending
	c.MaxWaiting = max(c.MaxWaiting, sh.WorkersEach)
	c.Metadata = map[string]string{"lanes.simulate": st.Name}
	c.PriorityGroups, c.PriorityPolicy, c.PriorityTimeout = nil, "", 0
	return []planner.ConsumerConfig{c}, []lane{{index: 0, name: c.Durable, workers: sh.WorkersEach}}
}

// create makes the stream and its consumers from the plan's definitions
// (the JetStream API's JSON form, as they are). They are fresh, so there is
// nothing to diff. Consumers are created a few at a time: a thousand lanes
// one by one take seconds.
func (s *sandbox) create(ctx context.Context, api *jsapi.Client, defs []planner.ConsumerConfig) error {
	if err := api.CreateStream(ctx, s.stream, s.plan.Stream); err != nil {
		return fmt.Errorf("creating the simulation stream %s: %w", s.stream, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, def := range defs {
		g.Go(func() error {
			if _, err := api.CreateConsumer(gctx, s.stream, def.Durable, def); err != nil {
				return fmt.Errorf("creating the simulation consumer %s: %w", def.Durable, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// remove deletes the workers' buckets and, unless keep, the stream and
// with it its consumers. What was never created is not an error.
func (s *sandbox) remove(ctx context.Context, api *jsapi.Client, keep bool) error {
	var errs []error
	for _, b := range s.buckets {
		err := api.DeleteStream(ctx, "KV_"+b)
		if err != nil && !jsapi.IsStreamNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the simulation bucket %s: %w", b, err))
		}
	}
	if keep {
		return errors.Join(errs...)
	}
	err := api.DeleteStream(ctx, s.stream)
	if err != nil && !jsapi.IsStreamNotFound(err) {
		errs = append(errs, fmt.Errorf("removing the simulation stream %s: %w", s.stream, err))
	}
	return errors.Join(errs...)
}

// settled reports whether every consumer has delivered everything and has
// nothing waiting for an ack: the server will deliver nothing more.
func (s *sandbox) settled(ctx context.Context, api *jsapi.Client) (bool, error) {
	l, err := api.List(ctx, s.stream)
	if err != nil {
		return false, err
	}
	if len(l.Missing) > 0 || len(l.Offline) > 0 {
		return false, nil
	}
	for _, info := range l.Consumers {
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return false, nil
		}
	}
	return true, nil
}
