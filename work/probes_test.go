package work

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
)

// probeCfg: a short lease and timeout, so that a lost lease shows soon.
func probeCfg(stream, design, name string) Config {
	return Config{Stream: stream, Design: design, Instance: name, Lease: 2 * time.Second, Timeout: time.Second}
}

// alwaysHealthy fails the test if any of the workers is ever unhealthy
// while the test runs: nothing the tests do (a server down, a lease not
// renewed, a stop) is a reason to restart the process.
func alwaysHealthy(t *testing.T, workers ...*started) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var bad []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, s := range workers {
				if err := s.w.Healthy(); err != nil {
					mu.Lock()
					bad = append(bad, s.w.cfg.Instance+": "+err.Error())
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("unhealthy %d times, first: %s", len(bad), bad[0])
		}
	})
}

// probeAnswer is what a probe handler answers: status and one line.
func probeAnswer(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want text/plain", ct)
	}
	body := rec.Body.String()
	if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Errorf("answer %q: want one line", body)
	}
	return rec.Code, strings.TrimSpace(body)
}

func notReadyFor(s *started, why string) func() bool {
	return func() bool {
		err := s.w.Ready()
		return err != nil && strings.Contains(err.Error(), why)
	}
}

// TestProbeServerDownAndBack: two instances, one lane. Both are ready
// once joined, the one without a lane too (more instances than lanes);
// with the server down both are not ready, and ready again once it is
// back. None is ever unhealthy: a restart would not bring the server back.
func TestProbeServerDownAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a server stopped and started again")
	}
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	h := HandlerFunc(func(context.Context, *Msg) error { return nil })

	unstarted, err := New(js, probeCfg(p.Stream.Name, p.Design.Name, "x"), h)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstarted.Ready(); err == nil || err.Error() != "not ready: not running" {
		t.Errorf("Ready before Run = %v, want not running", err)
	}
	if err := unstarted.Healthy(); err != nil {
		t.Errorf("Healthy before Run = %v", err)
	}

	a := startWorker(t, s.URL(), probeCfg(p.Stream.Name, p.Design.Name, "a"), h)
	b := startWorker(t, s.URL(), probeCfg(p.Stream.Name, p.Design.Name, "b"), h)
	alwaysHealthy(t, a, b)
	// Settled is the assignment; readiness counts a lane once it is taken
	// (after its hand-over), a moment later.
	testutil.WaitFor(t, "one serving the lane, both ready", 30*time.Second, func() bool {
		return settled(p, 0, 1, a, b) && a.w.Ready() == nil && b.w.Ready() == nil && a.w.Stats().Serving+b.w.Stats().Serving == 1
	})
	answers := map[string]bool{}
	for _, x := range []*started{a, b} {
		code, text := probeAnswer(t, x.w.ReadyHandler())
		if code != http.StatusOK {
			t.Errorf("%s: /readyz %d %q", x.w.cfg.Instance, code, text)
		}
		answers[text] = true
		if code, text := probeAnswer(t, x.w.HealthHandler()); code != http.StatusOK || text != "ok" {
			t.Errorf("%s: /healthz %d %q", x.w.cfg.Instance, code, text)
		}
	}
	if !answers["ready: serving 1 lane"] || !answers["ready: waiting for lanes (1 lane, 2 instances)"] {
		t.Errorf("readiness answers %v: want one serving the lane, the other waiting", answers)
	}

	up := s.Down()
	for _, x := range []*started{a, b} {
		testutil.WaitFor(t, x.w.cfg.Instance+" not ready", 30*time.Second, notReadyFor(x, "not ready: disconnected from the server"))
		if code, text := probeAnswer(t, x.w.ReadyHandler()); code != http.StatusServiceUnavailable || text != "not ready: disconnected from the server" {
			t.Errorf("%s: /readyz %d %q with the server down", x.w.cfg.Instance, code, text)
		}
	}
	up()
	testutil.WaitFor(t, "both ready again", 60*time.Second, func() bool {
		return a.w.Ready() == nil && b.w.Ready() == nil && settled(p, 0, 1, a, b)
	})
}

// TestProbeLeaseNotRenewed: the connection up as far as the client knows,
// but the membership lease cannot be renewed: a connection that hangs (a
// relay that holds its traffic). Not ready, with the reason; ready again
// once renewals go through; healthy all along. (Refusing the bucket's
// writes by a permission reload of the embedded server would be another
// way, but nats-server's ReloadOptions races with its own readers of the
// options, which the race detector reports.)
func TestProbeLeaseNotRenewed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: leases that lapse, 10s")
	}
	t.Parallel()
	s := natstest.Start(t, natstest.WithUsers(natstest.User{Name: "admin", Password: "a"}, natstest.User{Name: "worker", Password: "w"}))
	admin := strings.Replace(s.URL(), "nats://", "nats://admin:a@", 1)
	_, js := natstest.Connect(t, admin)
	p := testutil.Plan(t, "orders", 2)
	natstest.CreateLanes(t, js, p)
	h := HandlerFunc(func(context.Context, *Msg) error { return nil })

	t.Run("connection hangs", func(t *testing.T) {
		relay := natstest.NewRelay(t, s.Server.Addr().String())
		b := startWorker(t, "nats://worker:w@"+relay.Addr(), probeCfg(p.Stream.Name, p.Design.Name, "b"), h)
		alwaysHealthy(t, b)
		testutil.WaitFor(t, "b ready", 30*time.Second, func() bool { return b.w.Ready() == nil })
		relay.Freeze()
		testutil.WaitFor(t, "b not ready", 30*time.Second, notReadyFor(b, "not ready: the membership lease could not be renewed: "))
		t.Logf("Ready: %v", b.w.Ready())
		relay.Thaw()
		testutil.WaitFor(t, "b ready again", 30*time.Second, func() bool { return b.w.Ready() == nil })
	})
}

// TestProbeStopping: from the stop on (Run's context ended) the worker is
// not ready, while its message in flight finishes within the grace, and
// healthy; after a clean stop too.
func TestProbeStopping(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 1)
	running := make(chan struct{}, 1)
	release := make(chan struct{})
	cfg := probeCfg(p.Stream.Name, p.Design.Name, "a")
	cfg.Grace = time.Minute
	a := startWorker(t, s.URL(), cfg, HandlerFunc(func(ctx context.Context, m *Msg) error {
		running <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	alwaysHealthy(t, a)
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 1)...)
	<-running
	testutil.WaitFor(t, "a ready", 30*time.Second, func() bool { return a.w.Ready() == nil })
	a.stop()
	testutil.WaitFor(t, "a stopping", 30*time.Second, notReadyFor(a, "stopping"))
	if code, text := probeAnswer(t, a.w.ReadyHandler()); code != http.StatusServiceUnavailable || text != "stopping" {
		t.Errorf("/readyz %d %q while stopping", code, text)
	}
	select {
	case err := <-a.err:
		t.Fatalf("Run returned %v with the message still in flight", err)
	default:
	}
	close(release)
	if err := a.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := a.w.Ready(); err == nil || err.Error() != "not ready: stopped" {
		t.Errorf("Ready after the stop = %v", err)
	}
	if st := a.w.Stats(); st.Processed != 1 || st.HandedBack != 0 {
		t.Errorf("the message in flight: %+v, want processed", st)
	}
}

// TestProbeRunFailed: a Run that ended with an error of its own (here at
// start: no stream) makes the worker unhealthy: nothing serves the lanes
// any more.
func TestProbeRunFailed(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	a := startWorker(t, s.URL(), probeCfg("NOPE", "nope", "a"), HandlerFunc(func(context.Context, *Msg) error { return nil }))
	var runErr error
	select {
	case runErr = <-a.err:
		a.err <- runErr // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end")
	}
	if runErr == nil {
		t.Fatal("Run ended without an error")
	}
	err := a.w.Healthy()
	if err == nil || !strings.Contains(err.Error(), "unhealthy: the worker ended: ") || !errors.Is(err, runErr) {
		t.Errorf("Healthy = %v, want the end of Run (%v)", err, runErr)
	}
	code, text := probeAnswer(t, a.w.HealthHandler())
	if code != http.StatusServiceUnavailable || !strings.Contains(text, "stream NOPE not found") {
		t.Errorf("/healthz %d %q", code, text)
	}
	if err := a.w.Ready(); err == nil || !strings.HasPrefix(err.Error(), "not ready: stopped: ") {
		t.Errorf("Ready = %v", err)
	}
}

// TestProbeStuckAfter: the liveness rule on its own (a stuck worker cannot
// be made on demand): an upkeep that has not turned for longer than the
// bound is unhealthy, unless the worker is stopping; the bound with the
// defaults is the one docs/work.md gives.
func TestProbeStuckAfter(t *testing.T) {
	w := &Worker{cfg: Config{Lease: DefaultLease, Timeout: DefaultTimeout, Relist: DefaultRelist}}
	if got := w.stuckAfter(); got != 84*time.Second {
		t.Errorf("stuckAfter with the defaults = %s, want 84s (docs/work.md)", got)
	}
	w.cfg = Config{Lease: 2 * time.Second, Timeout: 100 * time.Millisecond, Relist: time.Second}
	if got := w.stuckAfter(); got != time.Minute {
		t.Errorf("stuckAfter of a short lease = %s, want the floor of a minute", got)
	}
	now := time.Now()
	limit := 84 * time.Second
	joined := probeState{running: true, sess: &membership.Session{}, beatAt: now.Add(-time.Second), loopAt: now}
	for _, tc := range []struct {
		name  string
		edit  func(*probeState)
		stuck string // "" healthy
	}{
		{"turning", func(*probeState) {}, ""},
		{"heartbeat stuck", func(s *probeState) { s.beatAt = now.Add(-limit - time.Second) }, "the membership lease has not been renewed or tried for 1m25s"},
		{"control loop stuck", func(s *probeState) { s.loopAt = now.Add(-2 * limit) }, "control loop has not turned for 2m48s"},
		{"stuck while stopping", func(s *probeState) { s.loopAt, s.stopping = now.Add(-2*limit), true }, ""},
		{"starting", func(s *probeState) { s.sess, s.beatAt, s.loopAt = nil, time.Time{}, time.Time{} }, ""},
		{"lease not renewed", func(s *probeState) { s.renewErr = nats.ErrTimeout }, ""},
		{"ended with an error", func(s *probeState) { s.ended, s.runErr = true, errors.New("boom") }, "the worker ended: boom"},
		{"ended after a stop", func(s *probeState) { s.ended, s.stopping, s.runErr = true, true, errors.New("permission denied") }, ""},
		{"grace expired", func(s *probeState) { s.ended, s.runErr = true, ErrGraceExpired }, ""},
	} {
		st := joined
		tc.edit(&st)
		err := st.health(now, limit)
		switch {
		case tc.stuck == "" && err != nil:
			t.Errorf("%s: %v, want healthy", tc.name, err)
		case tc.stuck != "" && (err == nil || !strings.Contains(err.Error(), tc.stuck)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.stuck)
		}
	}
}
