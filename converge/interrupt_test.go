package converge_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// onRequests calls fn (once) when the server has received n API requests
// whose subject contains part.
func onRequests(t *testing.T, url, part string, n int64, fn func()) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var seen atomic.Int64
	if _, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, part) && seen.Add(1) == n {
			go fn()
		}
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
}

// assertConverged re-runs apply, then checks that the server holds
// exactly the planned lanes, as designed: another apply has nothing to do.
func assertConverged(t *testing.T, url string, p *planner.Plan) {
	t.Helper()
	conn := open(t, url)
	apply(t, conn, p, converge.Options{})
	d, res := apply(t, conn, p, converge.Options{})
	if d.Pending() || res.WriteRequests != 0 {
		t.Fatalf("not converged: %+v", d.Counts())
	}
	_, js := natstest.Connect(t, url)
	s, err := js.Stream(context.Background(), p.Stream.Name)
	if err != nil {
		t.Fatal(err)
	}
	names := s.ConsumerNames(context.Background())
	n := 0
	for range names.Name() {
		n++
	}
	if n != len(p.Lanes) {
		t.Fatalf("%d consumers on the stream, want exactly the %d lanes (no duplicates, no leftovers)", n, len(p.Lanes))
	}
}

// TestInterruptedCreateConverges cancels apply mid-way through creating
// 200 lanes (Ctrl-C), then re-runs it.
func TestInterruptedCreateConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test (apply interrupted mid-create, then run again)")
	}
	t.Parallel()
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	p := testutil.PlanDesign(t, testutil.Seed(200))
	ctx, cancel := context.WithCancel(context.Background())
	onRequests(t, srv.URL(), "CONSUMER.CREATE", 50, cancel)
	t0 := time.Now()
	_, res, err := converge.Apply(ctx, c, p, converge.Options{Concurrency: 4})
	t.Logf("interrupted apply took %s", time.Since(t0))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want the interruption, got %v", err)
	}
	if res.Created >= 200 {
		t.Fatalf("the interruption came too late to test anything (%d created)", res.Created)
	}
	t.Logf("interrupted after %d lanes", res.Created)
	start := time.Now()
	d, res := apply(t, c, p, converge.Options{})
	t.Logf("re-run took %s", time.Since(start))
	if d.Stream.Action != converge.ActionUnchanged || res.Created+d.Counts()[converge.ActionUnchanged] != 200 {
		t.Fatalf("re-run: stream %s, %+v", d.Stream.Action, d.Counts())
	}
	assertConverged(t, srv.URL(), p)
}

// TestServerRestartMidApplyConverges restarts the server while apply
// creates lanes; the apply fails (deadline or lost connection) and the
// next one converges, with every lane created before the restart kept.
func TestServerRestartMidApplyConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (the server restarts mid-apply)")
	}
	srv := natstest.Start(t)
	p := testutil.PlanDesign(t, testutil.Seed(300))
	c := open(t, srv.URL())
	restarted := make(chan struct{})
	onRequests(t, srv.URL(), "CONSUMER.CREATE", 100, func() {
		srv.Restart()
		close(restarted)
	})
	_, _, err := converge.Apply(context.Background(), c, p, converge.Options{Concurrency: 4})
	<-restarted
	if err == nil {
		t.Log("apply finished before the restart bit; the re-run still must be a no-op")
	} else {
		t.Logf("apply during the restart: %.200s", err)
	}
	assertConverged(t, srv.URL(), p)
}

// TestRepartitionInterruptedAndRestarted stops a repartition twice: once
// while it creates the held lanes (Ctrl-C), once by a server restart
// while it waits for the drain. The re-run finishes with per-key order
// intact and nothing lost.
func TestRepartitionInterruptedAndRestarted(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fault test (a repartition interrupted, the server restarted)")
	}
	srv := natstest.Start(t)
	c := open(t, srv.URL())
	_, js := natstest.Connect(t, srv.URL())
	p3 := testutil.PlanDesign(t, testutil.Seed(3))
	apply(t, c, p3, converge.Options{})
	oc := newOrderCheck(t, js, p3.Stream.Name, "orders", 20)
	oc.publish(300)

	p24 := testutil.PlanDesign(t, testutil.Seed(24))
	ctx, cancel := context.WithCancel(context.Background())
	onRequests(t, srv.URL(), "CONSUMER.CREATE.ORDERS.orders-n24", 2, cancel)
	_, _, err := converge.Apply(ctx, c, p24, converge.Options{Concurrency: 1})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want the interruption, got %v", err)
	}
	if st := streamTransform(t, js, p3.Stream.Name); st != p3.Mapping.Destination {
		t.Fatalf("the mapping switched before every new lane existed: %s", st)
	}

	// Second run: lanes completed, mapping switched; the drain never ends
	// (no workers) and the server restarts meanwhile.
	restarted := make(chan struct{})
	onRequests(t, srv.URL(), "CONSUMER.LIST", 3, func() {
		srv.Restart()
		close(restarted)
	})
	// The apply either fails with the restart or, reconnected, keeps
	// waiting and stops at the drain timeout: both leave a re-runnable state.
	_, _, err = converge.Apply(context.Background(), c, p24, converge.Options{DrainTimeout: 2 * time.Second})
	<-restarted
	if err == nil {
		t.Fatal("the drain cannot finish without workers")
	}
	t.Logf("apply during the restart: %.200s", err)
	if st := streamTransform(t, js, p3.Stream.Name); st != p24.Mapping.Destination {
		t.Fatalf("mapping not switched: %s", st)
	}
	for _, l := range p24.Consumers {
		if info := consumerInfo(t, js, p24.Stream.Name, l.Durable); !info.Paused {
			t.Fatalf("%s must stay held across the restart", l.Durable)
		}
	}

	oc.publish(100) // into the held new lanes
	oc.watchLanes()
	_, res := apply(t, open(t, srv.URL()), p24, converge.Options{DrainTimeout: time.Minute})
	if res.Resumed != 24 || res.Deleted != 3 {
		t.Fatalf("final run %+v", res)
	}
	oc.waitAllProcessed(30 * time.Second)
	oc.assertInOrder()
	assertConverged(t, srv.URL(), p24)
}

func streamTransform(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.CachedInfo().Config.SubjectTransform; st != nil {
		return st.Destination
	}
	return ""
}
