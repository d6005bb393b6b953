// Package seedtest runs the seed's set_age example against a real
// nats-server, for the tests of the example handlers: the seed design
// (examples/seed/lanes.yaml) applied as lanes apply does, updates
// published per user, and the judgement of the users table.
package seedtest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// DesignFile is examples/seed/lanes.yaml.
func DesignFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "seed", "lanes.yaml")
}

// Plan is the seed design with partitions lanes, keysInFlight keys in
// flight and a 2 s ack wait, so that what a dead or cut-off instance held
// comes back soon.
func Plan(t testing.TB, partitions, keysInFlight int) *planner.Plan {
	t.Helper()
	return testutil.PlanDesign(t, testutil.ReadDesign(t, DesignFile()), func(d *planner.Design) {
		d.Partitions = partitions
		d.Lane.KeysInFlight = keysInFlight
		d.Lane.AckWait = planner.Duration(2 * time.Second)
	})
}

// Apply converges the server at url to p, as lanes apply does (a
// repartition drains the old lanes first, while workers run).
func Apply(t testing.TB, url string, p *planner.Plan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := connect.Open(ctx, connect.Options{Server: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, err := converge.Apply(ctx, conn, p, converge.Options{DrainTimeout: time.Minute}); err != nil {
		t.Fatalf("apply %d lanes, keys in flight %d: %v", len(p.Lanes), p.Design.Lane.KeysInFlight, err)
	}
}

// Subject is where the seed's updates for user go.
func Subject(user string) string { return "msgs.received_from." + user }

// Publisher publishes set_age updates, the n-th for a user setting age n,
// and remembers each user's last.
type Publisher struct {
	js   jetstream.JetStream
	mu   sync.Mutex
	last map[string]int
	seqs map[string]uint64
}

// NewPublisher publishes on js.
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js, last: map[string]int{}, seqs: map[string]uint64{}}
}

// Next publishes user's next update and returns its stream sequence. It
// tries again (with the same message ID: the stream keeps one) until the
// stream acknowledges it, for a minute at most: a publish given up on
// might have been stored, and the user's last update would be unknown.
func (p *Publisher) Next(user string) (uint64, error) {
	p.mu.Lock()
	age := p.last[user] + 1
	p.mu.Unlock()
	payload := fmt.Appendf(nil, `{"age": %d}`, age)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := p.js.Publish(ctx, Subject(user), payload, jetstream.WithMsgID(fmt.Sprintf("%s-%d", user, age)))
		cancel()
		if err == nil {
			p.mu.Lock()
			p.last[user], p.seqs[user] = age, ack.Sequence
			p.mu.Unlock()
			return ack.Sequence, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("publish %s's update %d: %w", user, age, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Run publishes updates for users in turn, one every every, until ctx
// ends (a publish under way is finished first) or a publish fails.
func (p *Publisher) Run(ctx context.Context, users []string, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		if _, err := p.Next(users[i%len(users)]); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Last is each user's last published age, and the stream sequence of its
// update.
func (p *Publisher) Last() (ages map[string]int, seqs map[string]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ages, seqs = map[string]int{}, map[string]uint64{}
	for u, a := range p.last {
		ages[u], seqs[u] = a, p.seqs[u]
	}
	return ages, seqs
}

// WaitRows waits until every user's row holds its last published update;
// past limit it fails the test, naming the rows that do not.
func WaitRows(t testing.TB, db *sql.DB, p *Publisher, limit time.Duration) {
	t.Helper()
	ages, seqs := p.Last()
	deadline := time.Now().Add(limit)
	for {
		rows, err := users.Rows(context.Background(), db)
		var wrong []string
		for u, age := range ages {
			if want := (users.Row{Age: age, Version: seqs[u]}); err == nil && rows[u] != want {
				wrong = append(wrong, fmt.Sprintf("%s: %+v, want %+v", u, rows[u], want))
			}
		}
		if err == nil && len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			slices.Sort(wrong)
			t.Fatalf("after %s, %d of %d users' rows do not hold their last update (error: %v): %s", limit, len(wrong), len(ages), err, strings.Join(wrong, "; "))
		}
		time.Sleep(20 * time.Millisecond) // a poll, not a wait for time to pass
	}
}

// NoDecrease fails the test if any row's version ever went down.
func NoDecrease(t testing.TB, db *sql.DB) {
	t.Helper()
	down, err := users.Decreases(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range down {
		t.Errorf("change %d took %s from version %d down to %d: an older update overwrote a newer one", c.N, c.ID, c.Was, c.Now)
	}
}
