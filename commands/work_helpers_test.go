//go:build unix

package commands_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// workCall is one POST that a lanes work --http child made.
type workCall struct {
	instance, lane, key string
	seq                 uint64
	attempt             int
	start, end          time.Time
}

// callRecorder is an HTTP handler service that records every call, with
// the instance, lane, key and sequence the Lanes-* headers carry, and when
// it started and ended. Each call takes work.
type callRecorder struct {
	URL     string
	work    atomic.Int64 // nanoseconds per call
	mu      sync.Mutex
	calls   []workCall // when they end
	started []workCall // when they start
}

func newCallRecorder(t *testing.T, work time.Duration) *callRecorder {
	r := &callRecorder{}
	r.work.Store(int64(work))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := workCall{instance: req.Header.Get("Lanes-Instance"), lane: req.Header.Get("Lanes-Lane"), key: req.Header.Get("Lanes-Key"), start: time.Now()}
		c.seq, _ = strconv.ParseUint(req.Header.Get("Lanes-Seq"), 10, 64)
		c.attempt, _ = strconv.Atoi(req.Header.Get("Lanes-Attempt"))
		io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.started = append(r.started, c)
		r.mu.Unlock()
		time.Sleep(time.Duration(r.work.Load()))
		c.end = time.Now()
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *callRecorder) snapshot() []workCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]workCall(nil), r.calls...)
}

func (r *callRecorder) startedCalls() []workCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]workCall(nil), r.started...)
}

func (r *callRecorder) distinct() int {
	seen := map[uint64]bool{}
	for _, c := range r.snapshot() {
		seen[c.seq] = true
	}
	return len(seen)
}

// checkWorkCalls: every published sequence was processed; each key's
// messages started in sequence order (a sequence may run again only as
// the redelivery of a message the killed instance had in flight); no lane
// ran two calls at once.
func checkWorkCalls(t *testing.T, calls []workCall, published int, killed string) {
	t.Helper()
	sort.Slice(calls, func(i, j int) bool { return calls[i].start.Before(calls[j].start) })
	seen := map[uint64]bool{}
	lastOfKey := map[string]workCall{}
	for _, c := range calls {
		if prev, ok := lastOfKey[c.key]; ok {
			switch {
			case c.seq < prev.seq:
				t.Errorf("key %s: seq %d (lane %s, %s) started after seq %d (%s)", c.key, c.seq, c.lane, c.instance, prev.seq, prev.instance)
			case c.seq == prev.seq && prev.instance != killed:
				t.Errorf("key %s: seq %d ran twice, first on %s which was not killed", c.key, c.seq, prev.instance)
			}
		}
		if prev, ok := lastOfKey[c.key]; !ok || c.seq >= prev.seq {
			lastOfKey[c.key] = c
		}
		seen[c.seq] = true
	}
	for seq := uint64(1); seq <= uint64(published); seq++ {
		if !seen[seq] {
			t.Errorf("seq %d never processed", seq)
		}
	}
	byLane := map[string][]workCall{}
	for _, c := range calls {
		byLane[c.lane] = append(byLane[c.lane], c)
	}
	for lane, cs := range byLane {
		for i := 1; i < len(cs); i++ {
			if cs[i].start.Before(cs[i-1].end) {
				t.Errorf("lane %s: seq %d on %s started before seq %d on %s ended: two instances at once", lane, cs[i].seq, cs[i].instance, cs[i-1].seq, cs[i-1].instance)
			}
		}
	}
}

// publisher publishes messages for keys k0..k(keys-1) in turn until
// stopped, and reports how many.
type publisher struct {
	stop chan struct{}
	n    chan int
}

func startPublisher(t *testing.T, js jetstream.JetStream, p *planner.Plan, keys int, every time.Duration) *publisher {
	pub := &publisher{stop: make(chan struct{}), n: make(chan int, 1)}
	go func() {
		n := 0
		defer func() { pub.n <- n }()
		for i := 0; ; i++ {
			select {
			case <-pub.stop:
				return
			case <-time.After(every):
			}
			subject, _ := p.SubjectForKey(fmt.Sprintf("k%d", i%keys))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := js.Publish(ctx, subject, []byte("m"))
			cancel()
			if err != nil {
				t.Errorf("publish: %v", err)
				return
			}
			n++
		}
	}()
	return pub
}

func (p *publisher) finish() int {
	close(p.stop)
	return <-p.n
}

// instancesServing counts the instances that made calls since t0.
func instancesServing(calls []workCall, since time.Time) map[string]bool {
	out := map[string]bool{}
	for _, c := range calls {
		if c.start.After(since) {
			out[c.instance] = true
		}
	}
	return out
}

// alive reports whether process pid runs (a zombie waiting to be reaped
// does not count).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

// stopChild sends sig and waits for the exit code.
func stopChild(t *testing.T, cmd *exec.Cmd, sig syscall.Signal, limit time.Duration) int {
	t.Helper()
	cmd.Process.Signal(sig)
	return waitExit(t, cmd, limit)
}
