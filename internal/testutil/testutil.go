// Package testutil holds what the tests of several packages share: a plan
// of a test design, waiting for a condition, and a buffer safe to write
// from one goroutine while another reads it. Tests only.
//
// It imports planner and nothing else of ours, so that the in-package
// tests of every package but planner can use it.
package testutil

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/planner"
)

// Plan plans a design named name with partitions lanes on the subjects
// name.received_from.*, edited by edit; a planning error fails the test.
func Plan(t testing.TB, name string, partitions int, edit ...func(*planner.Design)) *planner.Plan {
	t.Helper()
	return PlanDesign(t, planner.Design{Name: name, Subject: name + ".received_from.*", Partitions: partitions}, edit...)
}

// Seed is the seed case's design, "orders" on msgs.received_from.*, with
// partitions lanes and nothing else set (examples/seed/lanes.yaml sets
// more: tests that need its settings read it with ReadDesign).
func Seed(partitions int) planner.Design {
	return planner.Design{Name: "orders", Subject: "msgs.received_from.*", Partitions: partitions}
}

// PlanDesign plans d, edited by edit; a planning error fails the test.
func PlanDesign(t testing.TB, d planner.Design, edit ...func(*planner.Design)) *planner.Plan {
	t.Helper()
	for _, e := range edit {
		e(&d)
	}
	p, err := planner.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ReadDesign reads a design file (e.g. examples/seed/lanes.yaml), failing
// the test when it cannot.
func ReadDesign(t testing.TB, path string) planner.Design {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := planner.ParseDesign(data, path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TimingEnv names the environment variable that turns on the checks of
// figures a loaded machine moves (a live run's throughput within 20% of
// the model, its latency): LANES_TIMING_CHECKS=1. CI sets it in a run of
// its own (.ci/run); elsewhere those figures are logged, not judged.
// Correctness (order, counts, what ran) is checked always.
const TimingEnv = "LANES_TIMING_CHECKS"

// Timing reports whether the figures a loaded machine moves are checked
// in this run (see TimingEnv).
func Timing() bool { return os.Getenv(TimingEnv) == "1" }

// WaitFor polls cond until it holds, or fails the test once limit has
// passed: tests wait for what they need, never for a fixed time.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent use: a child process's
// output written by one goroutine and read by the test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
