// Package testutil holds what the tests of several packages share: waiting
// for a condition, and a buffer safe to write from one goroutine while
// another reads it. Tests only.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

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
