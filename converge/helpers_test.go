package converge_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/planner"
)

func open(t testing.TB, url string) *connect.Conn {
	t.Helper()
	c, err := connect.Open(context.Background(), connect.Options{Server: url, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func apply(t testing.TB, c *connect.Conn, p *planner.Plan, o converge.Options) (*converge.Diff, *converge.Result) {
	t.Helper()
	d, res, err := converge.Apply(context.Background(), c, p, o)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return d, res
}

// apiLog records every JetStream API request the server receives, by
// subscribing to $JS.API.> on its own connection.
type apiLog struct {
	mu       sync.Mutex
	subjects []string
	sentinel chan string
	nc       *nats.Conn
	next     int
}

const sentinelSubject = "lanestest.sentinel"

func watchAPI(t testing.TB, url string) *apiLog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &apiLog{sentinel: make(chan string, 64), nc: nc}
	// Both subscriptions feed one channel from the connection's read loop,
	// so a sentinel is seen only after every request that came before it
	// (separate async handlers would race each other).
	msgs := make(chan *nats.Msg, 1<<16)
	for _, subject := range []string{"$JS.API.>", sentinelSubject} {
		if _, err := nc.ChanSubscribe(subject, msgs); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { nc.Close(); close(msgs) }) // nothing is delivered after Close
	go func() {
		for m := range msgs {
			if m.Subject == sentinelSubject {
				l.sentinel <- string(m.Data)
				continue
			}
			l.mu.Lock()
			l.subjects = append(l.subjects, m.Subject)
			l.mu.Unlock()
		}
	}()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// since returns the requests seen after the previous call. A sentinel,
// published on each client connection after its requests, arrives after
// them: no sleeping. In a cluster the log's interest reaches the other
// nodes a moment after it subscribes, so a sentinel that finds no interest
// yet is sent again; each carries its own id, so a late copy of an older
// one is not taken for it.
func (l *apiLog) since(t testing.TB, clients ...*nats.Conn) []string {
	t.Helper()
	for _, client := range clients {
		l.next++
		id := strconv.Itoa(l.next)
		deadline := time.After(10 * time.Second)
	wait:
		for {
			if err := client.Publish(sentinelSubject, []byte(id)); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-l.sentinel:
				if got == id {
					break wait
				}
			case <-time.After(200 * time.Millisecond):
			case <-deadline:
				t.Fatal("sentinel not seen")
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.subjects
	l.subjects = nil
	return out
}

// writes keeps the requests that change something.
func writes(subjects []string) []string {
	var out []string
	for _, s := range subjects {
		for _, w := range []string{".CREATE.", ".UPDATE.", ".DELETE.", ".PAUSE.", ".PURGE."} {
			if strings.Contains(s, w) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// consumerInfo reads a consumer; in a cluster a just-created one may still
// be electing its leader, so a request that times out is asked again.
func consumerInfo(t testing.TB, js jetstream.JetStream, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := js.Consumer(ctx, stream, name)
		cancel()
		if err == nil {
			return c.CachedInfo()
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("consumer %s: %v", name, err)
		}
	}
}
