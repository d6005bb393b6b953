package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/examples/handlers/internal/seedtest"
	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/handlers"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/work"
)

// servers records which instance served each lane and when, from the
// Lanes-Lane and Lanes-Instance headers of lanes work's requests.
type servers struct {
	next http.Handler
	mu   sync.Mutex
	last map[string]served // lane -> its last request
	n    int               // requests
}

func (s *servers) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type served struct {
	instance string
	at       time.Time
}

func (s *servers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n++
	s.last[r.Header.Get("Lanes-Lane")] = served{r.Header.Get("Lanes-Instance"), time.Now()}
	s.mu.Unlock()
	s.next.ServeHTTP(w, r)
}

// lanesOf is the lanes whose last request came from instance.
func (s *servers) lanesOf(instance string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for l, sv := range s.last {
		if sv.instance == instance {
			out = append(out, l)
		}
	}
	return out
}

// servedSince: every lane of lanes had a request after t from another
// instance than gone.
func (s *servers) servedSince(lanes []string, gone string, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range lanes {
		if sv := s.last[l]; sv.instance == gone || !sv.at.After(t) {
			return false
		}
	}
	return true
}

// instances is how many instances made a request since t.
func (s *servers) instances(since time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, sv := range s.last {
		if sv.at.After(since) {
			seen[sv.instance] = true
		}
	}
	return len(seen)
}

// TestVersionCheckThroughChaos: three `lanes work` instances run the HTTP
// service against one SQLite database while updates keep coming for 24
// users, and the test kills one with SIGKILL, cuts one off from the
// server past its lease (a relay that stops forwarding) and lets it come
// back, repartitions 8 -> 16, and switches keys in flight on (8). The
// database is the judge: every user's row holds the last update published
// for it, and no version ever went down. Redeliveries happen (what the
// killed and the cut-off instances held comes back after its ack wait) and
// are counted; the version check absorbs them.
func TestVersionCheckThroughChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill, a cut-off, a repartition and a switch to key-parallel lanes under load, 30s and more")
	}
	t.Parallel()
	s := natstest.Start(t)
	seedtest.Apply(t, s.URL(), seedtest.Plan(t, 8, 1))
	_, js := natstest.Connect(t, s.URL())
	db := openDB(t)
	svc := newService(db, users.SetAge, quiet())
	rec := &servers{next: svc, last: map[string]served{}}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	relay := natstest.NewRelay(t, s.Server.Addr().String())
	args := func(name, url string) []string {
		return []string{"work", "-f", seedtest.DesignFile(), "-s", url, "--http", hs.URL, "--instance", name,
			"--lease", "2s", "--timeout", "5s", "--status-every", "0", "--verbose"}
	}
	w0 := startLanes(t, "w0", args("w0", s.URL())...)
	w1 := startLanes(t, "w1", args("w1", s.URL())...)
	w2 := startLanes(t, "w2", args("w2", "nats://"+relay.Addr())...)
	begin := time.Now()
	stage := func(what string) { t.Logf("%5.1fs %s", time.Since(begin).Seconds(), what) }

	var users []string
	for i := range 24 {
		users = append(users, fmt.Sprintf("user%02d", i))
	}
	pub := seedtest.NewPublisher(js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	published := make(chan error, 1)
	go func() { published <- pub.Run(ctx, users, 3*time.Millisecond) }()
	testutil.WaitFor(t, "three instances serving", time.Minute, func() bool { return rec.instances(begin) == 3 })
	stage("three instances serving")

	// kill -9: w0's lanes are served by the others once its lease and the
	// ack wait of what it held pass.
	held := rec.lanesOf("w0")
	_ = w0.Process.Kill()
	killed := time.Now()
	testutil.WaitFor(t, fmt.Sprintf("w0's %d lanes served by the others", len(held)), time.Minute, func() bool { return rec.servedSince(held, "w0", killed) })
	stage("w0 killed; its lanes served by the others")

	// Cut off past its lease, then back: w2's lanes move to w1, and w2
	// takes lanes again once it can reach the server.
	held = rec.lanesOf("w2")
	relay.Freeze()
	cut := time.Now()
	testutil.WaitFor(t, fmt.Sprintf("w2's %d lanes served while it is cut off", len(held)), time.Minute, func() bool { return rec.servedSince(held, "w2", cut) })
	stage("w2 cut off; its lanes served by the others")
	relay.Cut()
	relay.Thaw()
	back := time.Now()
	testutil.WaitFor(t, "w2 serving again", time.Minute, func() bool { return len(rec.lanesOf("w2")) > 0 && rec.instances(back) == 2 })
	stage("w2 serving again")

	// A repartition while they run, then key-parallel lanes.
	seedtest.Apply(t, s.URL(), seedtest.Plan(t, 16, 1))
	repartitioned := time.Now()
	testutil.WaitFor(t, "the 16 new lanes served", time.Minute, func() bool {
		n := 0
		for _, l := range append(rec.lanesOf("w1"), rec.lanesOf("w2")...) {
			if strings.Contains(l, "-n16-") {
				n++
			}
		}
		return n == 16 && rec.instances(repartitioned) == 2
	})
	stage("repartitioned 8 -> 16; the new lanes served")
	p16 := seedtest.Plan(t, 16, 8)
	seedtest.Apply(t, s.URL(), p16)
	stage("keys in flight 8 applied")
	// No advisory tells of a consumer's update: the workers see the new
	// keys in flight at their next listing (every 10 s), and a lane then
	// switches once what it has out is settled. The test goes on once lanes
	// are served key-parallel (their records show a window); how many of
	// the 16 by then is logged: under load some switch late (see
	// docs/performance.md), which the judge at the end covers either way.
	windows := 0
	testutil.WaitFor(t, "lanes served key-parallel (8 keys in flight)", 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sv, err := membership.ReadServing(ctx, js, p16.Stream.Name, p16.Design.Name)
		if err != nil {
			return false
		}
		windows = 0
		for _, l := range p16.Lanes {
			if w := sv.Lanes[l.Name].Window; w != nil && w.Size == 8 {
				windows++
			}
		}
		return windows >= 4
	})
	t.Logf("%d of 16 lanes served key-parallel", windows)
	stage("the lanes served key-parallel")
	keyed := rec.requests()
	testutil.WaitFor(t, "200 updates on the key-parallel lanes", time.Minute, func() bool { return rec.requests() >= keyed+200 })
	stage("200 updates on the key-parallel lanes")

	cancel()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	// Loaded runs have seen a key-parallel lane stall after the switch from
	// serial: its pinned request waits at the server with messages pending
	// and none delivered, until a session restart gets them moving (up to
	// 72 s seen): a cause not found yet (see docs/performance.md). Order and
	// the rows are not affected; the wait is long enough to ride it out.
	seedtest.WaitRows(t, db, pub, 3*time.Minute)
	stage("every row holds its user's last update")
	seedtest.NoDecrease(t, db)
	ages, _ := pub.Last()
	total := 0
	for _, a := range ages {
		total += a
	}
	t.Logf("%d updates for %d users; %d deliveries were redeliveries, %d updates left out by the version check (already applied, or older than the row)",
		total, len(ages), svc.Redelivered.Load(), svc.Skipped.Load())
	for name, w := range map[string]int{"w1": stop(t, w1), "w2": stop(t, w2)} {
		if w != 0 {
			t.Errorf("%s: exit %d after SIGTERM, want 0", name, w)
		}
	}
}

// plainUpsert is the write without the version check: the last write wins,
// whatever it carries. Only for TestStaleWriteWithoutTheCheck.
func plainUpsert(ctx context.Context, db *sql.DB, key string, seq uint64, payload []byte) (bool, error) {
	age, err := users.Parse(payload)
	if err != nil {
		return false, err
	}
	_, err = db.ExecContext(ctx, `INSERT INTO users (id, age, version) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET age = excluded.age, version = excluded.version`, key, age, int64(seq))
	return err == nil, err
}

// TestStaleWriteWithoutTheCheck is why the version check is there. An
// instance (a) runs alice's first update; its write is slow, and a is cut
// off from the server past its lease and the ack wait. lanes work stops
// waiting for the handler (lost contact) and never acks; another instance
// (b) takes the lane, gets the update again, writes it, then alice's
// second update. Then a's write, under way all along, lands. With the
// check it changes nothing: the row keeps the second update. Without it,
// the first update overwrites the second, and the change log shows the
// version going down: the corruption the rule prevents. lanes keeps every
// key in order; a write that outlives its handler's lane is outside what
// lanes can stop.
func TestStaleWriteWithoutTheCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: an instance cut off past its lease, 10s and more")
	}
	for _, tc := range []struct {
		name    string
		apply   applyFunc
		checked bool
	}{{"checked", users.SetAge, true}, {"plain upsert", plainUpsert, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Start(t)
			p := seedtest.Plan(t, 1, 1)
			seedtest.Apply(t, s.URL(), p)
			_, js := natstest.Connect(t, s.URL())
			db := openDB(t)
			pub := seedtest.NewPublisher(js)
			first, err := pub.Next("alice")
			if err != nil {
				t.Fatal(err)
			}
			// a's write of the first update waits for release.
			release, underway := make(chan struct{}), make(chan struct{})
			var once sync.Once
			late := make(chan error, 1)
			apply := func(ctx context.Context, db *sql.DB, key string, seq uint64, payload []byte) (bool, error) {
				stale := false
				if seq == first {
					once.Do(func() { stale = true })
				}
				if !stale {
					return tc.apply(ctx, db, key, seq, payload)
				}
				close(underway)
				<-release
				applied, err := tc.apply(context.Background(), db, key, seq, payload) // the write was under way: it is not cancelled
				late <- err
				return applied, err
			}
			hs := httptest.NewServer(newService(db, apply, quiet()))
			defer hs.Close()
			free := sync.OnceFunc(func() { close(release) })
			defer free() // before hs.Close, which waits for the request held here
			relay := natstest.NewRelay(t, s.Server.Addr().String())
			cfg := func(name string) work.Config {
				return work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: name, Lease: 2 * time.Second}
			}
			a := runWorker(t, "nats://"+relay.Addr(), cfg("a"), hs.URL)
			<-underway
			relay.Freeze()
			runWorker(t, s.URL(), cfg("b"), hs.URL)
			seedtest.WaitRows(t, db, pub, time.Minute) // b ran the first update again
			if _, err := pub.Next("alice"); err != nil {
				t.Fatal(err)
			}
			seedtest.WaitRows(t, db, pub, time.Minute) // and the second
			free()
			if err := <-late; err != nil {
				t.Fatalf("a's late write: %v", err)
			}
			a()
			rows, err := users.Rows(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			down, err := users.Decreases(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			if tc.checked {
				if rows["alice"].Age != 2 || len(down) > 0 {
					t.Errorf("with the version check: alice %+v, %d versions down; want the second update (age 2) and none", rows["alice"], len(down))
				}
				return
			}
			if rows["alice"].Age != 1 || len(down) != 1 {
				t.Errorf("without the version check: alice %+v, %d versions down; want the stale first update (age 1) over the second, and one version down", rows["alice"], len(down))
			}
			t.Logf("without the version check the late write of seq %d overwrote alice's newer update: %+v; change log: %+v", first, rows["alice"], down)
		})
	}
}

// runWorker runs the work package with the HTTP handler, as lanes work
// --http does, connected to url; the returned func stops it.
func runWorker(t *testing.T, url string, cfg work.Config, to string) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := handlers.NewHTTP(to)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet()
	w, err := work.New(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("worker %s did not stop", cfg.Instance)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
