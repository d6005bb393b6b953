package converge_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestRepartitionKeepsOrder changes 4 lanes to 6 while a publisher keeps
// publishing and a worker per lane checks per-key order: zero violations,
// zero loss. It also checks the end state: only the new lanes, resumed,
// the mapping on the new generation.
func TestRepartitionKeepsOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p4 := testutil.PlanDesign(t, testutil.Seed(4))
	apply(t, c, p4, converge.Options{})

	oc := newOrderCheck(t, js, p4.Stream.Name, "orders", 40)
	oc.publish(2000) // a backlog in the old lanes when the mapping switches
	oc.watchLanes()
	stop := oc.publishInBackground()

	p6 := testutil.PlanDesign(t, testutil.Seed(6))
	var drainSeen bool
	d, res := apply(t, c, p6, converge.Options{DrainTimeout: time.Minute, Progress: func(pr converge.Progress) {
		if pr.Phase == converge.PhaseDrain {
			drainSeen = true
		}
	}})
	if d.Repartition == nil || d.Repartition.To != 6 || d.Repartition.Switched {
		t.Fatalf("repartition not planned: %+v", d.Repartition)
	}
	if !res.MappingSwitched || res.Created != 6 || res.Held != 6 || res.Resumed != 6 || res.Deleted != 4 || !res.Drain.Drained || !drainSeen {
		t.Fatalf("result %+v drain %+v", res, res.Drain)
	}
	stop()
	oc.waitAllProcessed(30 * time.Second)
	oc.assertInOrder()

	s, _ := js.Stream(context.Background(), p6.Stream.Name)
	if got := s.CachedInfo().Config.SubjectTransform.Destination; got != p6.Mapping.Destination {
		t.Fatalf("mapping %s", got)
	}
	names := s.ConsumerNames(context.Background())
	n := 0
	for name := range names.Name() {
		n++
		info := consumerInfo(t, js, p6.Stream.Name, name)
		if info.Config.Metadata[planner.MetaPartitions] != "6" || info.Paused || info.Config.Metadata[planner.MetaHeld] != "" {
			t.Fatalf("after the repartition %s: paused=%v metadata=%v", name, info.Paused, info.Config.Metadata)
		}
	}
	if n != 6 {
		t.Fatalf("%d consumers left, want the 6 new lanes", n)
	}
	if d, _ := apply(t, c, p6, converge.Options{}); d.Pending() {
		t.Fatalf("after the repartition apply still has work: %+v", d.Counts())
	}
}

// TestRepartitionDrainTimeoutResumes: with no worker on the old lanes the
// drain cannot finish; apply stops at the timeout with ExitIncomplete's
// error, the new lanes held and the mapping switched. A third partition
// count is then refused; the same count, once drained, completes.
func TestRepartitionDrainTimeoutResumes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p2 := testutil.PlanDesign(t, testutil.Seed(2))
	apply(t, c, p2, converge.Options{})
	oc := newOrderCheck(t, js, p2.Stream.Name, "orders", 10)
	oc.publish(100)

	p3 := testutil.PlanDesign(t, testutil.Seed(3))
	_, res, err := converge.Apply(context.Background(), c, p3, converge.Options{DrainTimeout: 300 * time.Millisecond})
	var inc *converge.IncompleteError
	if !errors.As(err, &inc) || res.Drain == nil || res.Drain.Remaining != 100 || res.Resumed != 0 || res.Deleted != 0 {
		t.Fatalf("want incomplete with 100 left, got %v, %+v", err, res.Drain)
	}
	oc.publish(30) // published after the switch: they wait in the held n3 lanes
	for _, l := range testutil.PlanDesign(t, testutil.Seed(3)).Consumers {
		if info := consumerInfo(t, js, p3.Stream.Name, l.Durable); !info.Paused || info.Config.Metadata[planner.MetaHeld] != "repartition" {
			t.Fatalf("%s not held: %+v", l.Durable, info.Config)
		}
	}

	// A third partition count while this one is in progress: refused.
	_, _, err = converge.Apply(context.Background(), c, testutil.PlanDesign(t, testutil.Seed(5)), converge.Options{})
	var refused *converge.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("a third partition count must be refused, got %v", err)
	}
	// Going back to 2 now would break order (the mapping already feeds n3).
	if _, _, err = converge.Apply(context.Background(), c, p2, converge.Options{}); !errors.As(err, &refused) {
		t.Fatalf("reverting after the switch must be refused, got %v", err)
	}

	// Workers drain the old lanes; the re-run finishes.
	oc.watchLanes()
	d, res := apply(t, c, p3, converge.Options{DrainTimeout: time.Minute})
	if !d.Repartition.Switched || res.Resumed != 3 || res.Deleted != 2 {
		t.Fatalf("re-run: %+v / %+v", d.Repartition, res)
	}
	oc.waitAllProcessed(30 * time.Second)
	oc.assertInOrder()
}

// TestRepartitionAccountMapping: the mapping lives in the account; apply
// creates the held new lanes and the stream subject, says what to install
// and stops; after the operator switches the mapping, --mapping-switched
// finishes. Order holds throughout.
func TestRepartitionAccountMapping(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	d4 := testutil.Seed(4)
	d4.Mapping = planner.MappingAccount
	p4 := testutil.PlanDesign(t, d4)
	acc := srv.GlobalAccount()
	if err := acc.AddMapping(p4.Mapping.Source, p4.Mapping.Destination); err != nil {
		t.Fatal(err)
	}
	d, _ := apply(t, c, p4, converge.Options{})
	if d.Account == nil || len(d.Account.Unverified) == 0 {
		t.Fatal("account mode must say what it cannot verify")
	}
	oc := newOrderCheck(t, js, p4.Stream.Name, "orders", 30)
	oc.publish(500)
	oc.watchLanes()

	d6 := testutil.Seed(6)
	d6.Mapping = planner.MappingAccount
	p6 := testutil.PlanDesign(t, d6)
	d, res, err := converge.Apply(context.Background(), c, p6, converge.Options{})
	var inc *converge.IncompleteError
	if !errors.As(err, &inc) || res.Held != 6 || d.Repartition == nil || d.Repartition.Switched {
		t.Fatalf("first step: %v %+v", err, res)
	}
	s, _ := js.Stream(context.Background(), p6.Stream.Name)
	if subj := s.CachedInfo().Config.Subjects; len(subj) != 2 {
		t.Fatalf("stream subjects %v, want the old and the new generation", subj)
	}
	stop := oc.publishInBackground()
	if err := acc.AddMapping(p6.Mapping.Source, p6.Mapping.Destination); err != nil { // the operator's step
		t.Fatal(err)
	}
	_, res = apply(t, c, p6, converge.Options{MappingSwitched: true, DrainTimeout: time.Minute})
	if res.Resumed != 6 || res.Deleted != 4 {
		t.Fatalf("second step: %+v", res)
	}
	stop()
	oc.waitAllProcessed(30 * time.Second)
	oc.assertInOrder()
}
