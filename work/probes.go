package work

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/membership"
)

// Probes: what a supervisor (Kubernetes) asks of a running worker.
//
// Ready: the worker takes its part of the work: connected, in the
// membership under a lease it renews, serving lanes or waiting for some
// (more instances than lanes leaves some with none). Not while it starts,
// while the server is unreachable, while its lease cannot be renewed, nor
// once it stops.
//
// Healthy: the process is worth keeping. Only a Run that ended with an
// error of its own, or an upkeep that stopped going round, calls for a
// restart; a server that is down does not (the worker reconnects on its
// own, and a new process would wait for the same server), nor does a
// stop, which the grace period bounds.

// probe is what Run and the heartbeat tell the probes; its own lock, so a
// probe never waits behind the worker's.
type probe struct {
	mu       sync.Mutex
	running  bool                // Run was called
	sess     *membership.Session // set once this instance joined
	stopping bool                // Run's context ended, or Abort
	ended    bool                // Run returned runErr
	runErr   error
	renewErr error     // the last renewal's (or join's) failure; nil after one that worked
	beatAt   time.Time // the heartbeat's last turn
	loopAt   time.Time // the control loop's last turn
}

func (p *probe) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running = true
}

// joined: the first join worked; the upkeep starts now.
func (p *probe) joined(sess *membership.Session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.sess, p.renewErr, p.beatAt, p.loopAt = sess, nil, now, now
}

func (p *probe) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopping = true
}

func (p *probe) end(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended, p.runErr = true, err
}

// renewed records how the last renewal (or join again) went.
func (p *probe) renewed(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.renewErr = err
}

func (p *probe) beat() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beatAt = time.Now()
}

func (p *probe) turn() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loopAt = time.Now()
}

// probeState is a copy of the probe, read at once.
type probeState struct {
	running, stopping, ended bool
	sess                     *membership.Session
	runErr, renewErr         error
	beatAt, loopAt           time.Time
}

func (p *probe) state() probeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return probeState{running: p.running, stopping: p.stopping, ended: p.ended, sess: p.sess,
		runErr: p.runErr, renewErr: p.renewErr, beatAt: p.beatAt, loopAt: p.loopAt}
}

// health is Healthy on a state read at now; stuckAfter bounds a turn of
// the upkeep.
func (s probeState) health(now time.Time, stuckAfter time.Duration) error {
	switch {
	case s.ended:
		if s.stopping || s.runErr == nil || errors.Is(s.runErr, ErrGraceExpired) || errors.Is(s.runErr, ErrAborted) {
			return nil // a stop asked for: the process is on its way out
		}
		return fmt.Errorf("unhealthy: the worker ended: %w", s.runErr)
	case s.stopping || s.sess == nil:
		return nil // a stop is bounded by the grace, a start by the join's own wait
	}
	if d := now.Sub(s.beatAt); d > stuckAfter {
		return fmt.Errorf("unhealthy: stuck: the membership lease has not been renewed or tried for %s (more than %s)", d.Round(time.Second), stuckAfter)
	}
	if d := now.Sub(s.loopAt); d > stuckAfter {
		return fmt.Errorf("unhealthy: stuck: the worker's control loop has not turned for %s (more than %s)", d.Round(time.Second), stuckAfter)
	}
	return nil
}

// stuckAfter is how long the upkeep may go without a turn before the
// worker is called stuck: twice the longest gap a working one shows. The
// heartbeat turns every third of the lease and the control loop at least
// every Relist; the longest turn of either is a join again that waits for
// the instance's name to be free (two leases and a second, plus half a
// second between tries) after a few requests of Timeout each. With the
// defaults (5s lease, 5s timeout, 10s relist) that is 84s; never under a
// minute, so that a starved machine is not taken for a stuck worker.
func (w *Worker) stuckAfter() time.Duration {
	turn := 2*w.cfg.Lease + 2*time.Second + 4*w.cfg.Timeout
	return max(2*(max(w.cfg.Relist, w.cfg.Lease/3)+turn), time.Minute)
}

// Healthy says whether the process should keep running: nil, or why it
// should be restarted (Run ended with an error of its own, or the worker
// is stuck: its lease upkeep or its control loop has not turned for far
// longer than it can take). A server that is down, a lease that cannot be
// renewed and a stop are not reasons: see Ready for those.
func (w *Worker) Healthy() error {
	return w.probe.state().health(time.Now(), w.stuckAfter())
}

// Ready says whether the worker takes its part of the work: nil when it is
// connected, joined the membership (its lease held and renewed) and serves
// lanes or waits for some; else why not ("not ready: disconnected from the
// server", "not ready: the membership lease could not be renewed: ...",
// "stopping").
func (w *Worker) Ready() error {
	_, err := w.readiness()
	return err
}

// readiness is Ready, with what a ready worker does ("ready: serving 3
// lanes").
func (w *Worker) readiness() (string, error) {
	s := w.probe.state()
	switch {
	case s.ended && s.runErr != nil:
		return "", fmt.Errorf("not ready: stopped: %w", s.runErr)
	case s.ended:
		return "", errors.New("not ready: stopped")
	case s.stopping:
		return "", errors.New("stopping")
	case !s.running:
		return "", errors.New("not ready: not running")
	case s.sess == nil:
		return "", errors.New("not ready: joining the membership")
	case !w.nc.IsConnected():
		return "", errors.New("not ready: disconnected from the server")
	}
	// The last renewal failed, or none got through in time: the lease may
	// run out (or has), and the lanes of the epoch stop at the fence.
	if s.renewErr != nil {
		return "", fmt.Errorf("not ready: the membership lease could not be renewed: %w", s.renewErr)
	}
	if epoch, _ := s.sess.Fence().Current(); !s.sess.Fence().Holds(epoch) {
		return "", errors.New("not ready: the membership lease could not be renewed: no renewal got through within the lease")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, in := w.members[w.cfg.Instance]; !in {
		return "", errors.New("not ready: joining the membership") // its own join not seen yet (or the watch is being repaired)
	}
	serving := 0
	for _, st := range w.stats {
		if st.serving.Load() {
			serving++
		}
	}
	switch {
	case serving == 1:
		return "ready: serving 1 lane", nil
	case serving > 0:
		return fmt.Sprintf("ready: serving %d lanes", serving), nil
	}
	return fmt.Sprintf("ready: waiting for lanes (%s, %s)", nOf(len(w.lanes), "lane", "lanes"), nOf(len(w.members), "instance", "instances")), nil
}

func nOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// HealthHandler answers a liveness probe (Kubernetes livenessProbe, GET
// /healthz): 200 "ok", or 503 and why the process should be restarted
// (Healthy). One line of text.
func (w *Worker) HealthHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		answerProbe(rw, "ok", w.Healthy())
	})
}

// ReadyHandler answers a readiness probe (Kubernetes readinessProbe, GET
// /readyz): 200 "ready: serving 3 lanes", or 503 and why not (Ready). One
// line of text.
func (w *Worker) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		text, err := w.readiness()
		answerProbe(rw, text, err)
	})
}

func answerProbe(rw http.ResponseWriter, ok string, err error) {
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	if err != nil {
		rw.WriteHeader(http.StatusServiceUnavailable)
		ok = strings.Join(strings.Fields(err.Error()), " ") // one line, whatever the error holds
	}
	_, _ = fmt.Fprintln(rw, ok)
}
