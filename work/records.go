package work

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchRecords follows the membership bucket's keys that match pattern
// (the operators' requests: skips, quarantined keys) until the returned
// stop is called, giving each put and delete to on, from one goroutine.
// It waits, at most the timeout, for the records already there, so that
// a lane taken from now on knows of them; a watch that ends is begun
// again a second later. what names the records in the log.
func (w *Worker) watchRecords(what, pattern string, on func(jetstream.KeyValueEntry)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var once sync.Once
		for ctx.Err() == nil {
			wctx, wcancel := context.WithCancel(ctx)
			kw, err := w.records().KV.Watch(wctx, pattern)
			if err == nil {
				for e := range kw.Updates() {
					if e == nil {
						once.Do(func() { close(synced) })
						continue
					}
					on(e)
				}
				_ = kw.Stop()
			} else {
				w.log.Debug("cannot watch "+what+"; trying again", "error", err)
			}
			wcancel()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	select {
	case <-synced:
	case <-time.After(w.cfg.Timeout):
		w.log.Warn("cannot read " + what + " yet: watching on")
	}
	return func() {
		cancel()
		<-done
	}
}
