package converge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestServerGoneStopsWithinTimeout: the server dies while apply creates
// 600 lanes. Apply must stop within about one --timeout (not one per
// remaining request), with the timeout as its error, and say what is left
// to do instead of listing one failure per lane.
func TestServerGoneStopsWithinTimeout(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := testutil.PlanDesign(t, testutil.Seed(600))
	c, err := connect.Open(context.Background(), connect.Options{Server: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	onRequests(t, srv.URL(), "CONSUMER.CREATE", 50, func() { srv.Stop() })

	type outcome struct {
		res *converge.Result
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		_, res, err := converge.Apply(context.Background(), c, p, converge.Options{Concurrency: 4})
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("apply did not stop within 20s of the server going away (--timeout 1s)")
	}
	took := time.Since(start)
	t.Logf("stopped after %s: %v", took, o.err)
	if took > 6*time.Second {
		t.Fatalf("took %s to stop with --timeout 1s", took)
	}
	var ce *connect.Error
	if !errors.As(o.err, &ce) || (ce.Kind != connect.KindTimeout && ce.Kind != connect.KindConnect) {
		t.Fatalf("want a timeout or connection error, got %v", o.err)
	}
	if len(o.res.Failures) > 4 || strings.Count(o.err.Error(), "\n") > 12 {
		t.Fatalf("%d failures reported, want at most the requests in flight:\n%v", len(o.res.Failures), o.err)
	}
	if len(o.res.Remaining) == 0 || !strings.Contains(o.err.Error(), "not done") {
		t.Fatalf("apply must say what is left to do: remaining %v, error %v", o.res.Remaining, o.err)
	}
}
