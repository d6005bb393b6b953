package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/examples/handlers/internal/seedtest"
	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/internal/natstest"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := users.Open(filepath.Join(t.TempDir(), "users.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// post sends what lanes work sends for one message.
func post(t *testing.T, url, key string, seq uint64, attempt int, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Lanes-Key", key)
	}
	req.Header.Set("Lanes-Seq", strconv.FormatUint(seq, 10))
	req.Header.Set("Lanes-Attempt", strconv.Itoa(attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServiceVersionCheck: the service applies an update only if it is
// newer than the row; a repeated or older one is acked (200) and changes
// nothing; what is not a set_age update is terminated (422).
func TestServiceVersionCheck(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	svc := newService(db, users.SetAge, quiet())
	hs := httptest.NewServer(svc)
	defer hs.Close()
	for _, m := range []struct {
		key     string
		seq     uint64
		attempt int
		age     int
	}{
		{"alice", 1, 1, 30}, {"bob", 2, 1, 40}, {"alice", 3, 1, 31},
		{"alice", 3, 2, 31}, // redelivered
		{"alice", 1, 2, 30}, // older than the row: a stale delivery
		{"carol", 5, 1, 50}, {"bob", 4, 1, 41}, {"o'brien", 6, 1, 60},
	} {
		if code := post(t, hs.URL, m.key, m.seq, m.attempt, fmt.Sprintf(`{"age": %d}`, m.age)); code != http.StatusOK {
			t.Fatalf("%s seq %d: %d, want 200", m.key, m.seq, code)
		}
	}
	for _, bad := range []struct{ key, body string }{{"alice", `{"name": "x"}`}, {"alice", "set_age 32"}, {"", `{"age": 1}`}} {
		if code := post(t, hs.URL, bad.key, 9, 1, bad.body); code != http.StatusUnprocessableEntity {
			t.Errorf("key %q, body %q: %d, want 422 (terminate)", bad.key, bad.body, code)
		}
	}
	rows, err := users.Rows(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]users.Row{"alice": {Age: 31, Version: 3}, "bob": {Age: 41, Version: 4}, "carol": {Age: 50, Version: 5}, "o'brien": {Age: 60, Version: 6}}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
	if s, r := svc.Skipped.Load(), svc.Redelivered.Load(); s != 2 || r != 2 {
		t.Errorf("skipped %d, redelivered %d: want 2 and 2", s, r)
	}
	seedtest.NoDecrease(t, db)
}

// flaky answers 503 to a message's first attempt after applying it, for
// every third message: lanes work gets it again (a redelivery of an
// update the table already holds, as after a worker died between the
// write and the ack).
type flaky struct {
	next http.Handler
	mu   sync.Mutex
	seen map[string]bool
	n    int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq := r.Header.Get("Lanes-Seq")
	f.mu.Lock()
	f.n++
	fail := f.n%3 == 0 && !f.seen[seq]
	f.seen[seq] = true
	f.mu.Unlock()
	if !fail {
		f.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	http.Error(w, "applied, but the answer is lost", http.StatusServiceUnavailable)
}

// TestSeedEndToEnd: the seed's example through `lanes work --http`: set_age
// updates for alice, bob and carol, a third of them redelivered after they
// were applied. The table holds each user's last update, no version went
// down, and the service saw the redeliveries and left them out.
func TestSeedEndToEnd(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	p := seedtest.Plan(t, 8, 1)
	seedtest.Apply(t, s.URL(), p)
	_, js := natstest.Connect(t, s.URL())
	db := openDB(t)
	svc := newService(db, users.SetAge, quiet())
	hs := httptest.NewServer(&flaky{next: svc, seen: map[string]bool{}})
	defer hs.Close()
	w := startLanes(t, "lanes work", "work", "-f", seedtest.DesignFile(), "-s", s.URL(), "--http", hs.URL, "--status-every", "0")
	pub := seedtest.NewPublisher(js)
	for range 5 {
		for _, u := range []string{"alice", "bob", "carol"} {
			if _, err := pub.Next(u); err != nil {
				t.Fatal(err)
			}
		}
	}
	seedtest.WaitRows(t, db, pub, time.Minute)
	seedtest.NoDecrease(t, db)
	if svc.Redelivered.Load() == 0 || svc.Skipped.Load() == 0 {
		t.Errorf("redelivered %d, skipped %d: want both above 0 (a third of the messages were answered 503 after being applied)", svc.Redelivered.Load(), svc.Skipped.Load())
	}
	if code := stop(t, w); code != 0 {
		t.Errorf("lanes work: exit %d after SIGTERM, want 0", code)
	}
}
