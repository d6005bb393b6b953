package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/planner"
)

// CreateLanes creates a plan's stream and lanes as the plan defines them
// (their JSON form is the JetStream API's), so tests get real lanes without
// depending on apply. change, if given, edits each lane before it is made.
func CreateLanes(t testing.TB, js jetstream.JetStream, p *planner.Plan, change ...func(*jetstream.ConsumerConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var sc jetstream.StreamConfig
	Convert(t, p.Stream, &sc)
	if err := RetryPlacement(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, sc); return err }); err != nil {
		t.Fatalf("create stream %s: %v", sc.Name, err)
	}
	// Many lanes: a few requests in flight, as apply does.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, c := range p.Consumers {
		var cc jetstream.ConsumerConfig
		Convert(t, c, &cc)
		for _, f := range change {
			f(&cc)
		}
		g.Go(func() error {
			if _, err := js.CreateConsumer(gctx, sc.Name, cc); err != nil {
				return fmt.Errorf("create lane %s: %w", cc.Durable, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Convert copies a planner definition into the library's type through
// their shared JSON form.
func Convert(t testing.TB, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// SubjectsFor returns n distinct publish subjects whose key lands in
// partition of p (the pattern's '*' tokens filled with k0, k1, ...).
func SubjectsFor(t testing.TB, p *planner.Plan, partition, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		s := fillPattern(p.Design.Subject, "k"+strconv.Itoa(i))
		if got, ok := p.Layout.PartitionOf([]byte(s)); ok && got == partition {
			out = append(out, s)
		}
	}
	if len(out) < n {
		t.Fatalf("found only %d subjects for partition %d", len(out), partition)
	}
	return out
}

func fillPattern(pattern, key string) string {
	toks := strings.Split(pattern, ".")
	for i, tok := range toks {
		if tok == "*" {
			toks[i] = key
		}
	}
	return strings.Join(toks, ".")
}

// Publish publishes each subject once (payload "m") and waits for the acks.
func Publish(t testing.TB, js jetstream.JetStream, subjects ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range subjects {
		if _, err := js.Publish(ctx, s, []byte("m")); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
	}
}

// Fetch pulls up to n messages from a lane, as a worker would, and acks
// them when ack is true. It returns the messages it got.
func Fetch(t testing.TB, js jetstream.JetStream, stream, lane string, n int, ack bool) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, lane)
	if err != nil {
		t.Fatalf("consumer %s: %v", lane, err)
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatalf("fetch from %s: %v", lane, err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		if ack {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("ack: %v", err)
			}
		}
		out = append(out, m)
	}
	return out
}

// PublishAsync publishes many subjects with acks in flight, and waits for
// them all: for benchmarks that need thousands of messages.
func PublishAsync(t testing.TB, js jetstream.JetStream, subjects ...string) {
	t.Helper()
	for _, s := range subjects {
		if _, err := js.PublishAsync(s, []byte("m")); err != nil {
			t.Fatalf("publish %s: %v", s, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("async publishes not acknowledged within a minute")
	}
}

// WaitPending waits until a lane's server-side pending count is want. The
// server counts a stored message into its consumers' pending asynchronously
// (its signal loop), so a read right after a publish ack can lag.
func WaitPending(t testing.TB, js jetstream.JetStream, stream, lane string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := js.Consumer(ctx, stream, lane)
		cancel()
		if err != nil {
			t.Fatalf("consumer %s: %v", lane, err)
		}
		got := c.CachedInfo().NumPending
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lane %s has %d pending, want %d", lane, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RetryPlacement runs create again while the cluster answers that it
// cannot place the replicas (err_code 10005): right after a cluster
// starts, or on a loaded machine, its meta leader can take a node for
// offline for a moment.
func RetryPlacement(ctx context.Context, create func() error) error {
	for {
		err := create()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10005 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
