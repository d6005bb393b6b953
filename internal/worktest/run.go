package worktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/work"
)

// Start runs a lanes work instance with cfg and h until the test ends;
// stop stops it sooner (and waits for it, as the test's end does).
func Start(t testing.TB, js jetstream.JetStream, cfg work.Config, h work.Handler) (stop func()) {
	t.Helper()
	w, err := work.New(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
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

// Dial opens a connection to url as the commands do, closed when the test
// ends.
func Dial(t testing.TB, url string) *connect.Conn {
	t.Helper()
	c, err := connect.Open(context.Background(), connect.Options{Server: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
