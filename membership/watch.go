package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MemberEvent is one change seen by the membership watch; an event with
// Initial set and no instance marks the end of the initial snapshot.
type MemberEvent struct {
	Instance string
	Epoch    string // of a live member
	Alive    bool
	Initial  bool
}

// WatchMembers streams the design's member keys: puts are alive members,
// deletes and TTL expiry markers are departures.
func WatchMembers(ctx context.Context, kv jetstream.KeyValue, scope string, timeout time.Duration) (<-chan MemberEvent, error) {
	w, err := watch(ctx, kv, scope+".m.*", timeout)
	if err != nil {
		return nil, fmt.Errorf("watching the membership: %w", err)
	}
	prefix := scope + ".m."
	return follow(ctx, w, 64, func(e jetstream.KeyValueEntry) (MemberEvent, bool) {
		if e == nil {
			return MemberEvent{Initial: true}, true
		}
		ev := MemberEvent{Instance: strings.TrimPrefix(e.Key(), prefix), Alive: e.Operation() == jetstream.KeyValuePut}
		if ev.Alive {
			var m Member
			_ = json.Unmarshal(e.Value(), &m) // no epoch: an older lanes work
			ev.Epoch = m.Epoch
		}
		return ev, true
	}), nil
}

// follow turns a watch's updates into events (conv says which), until ctx
// ends or the watch does; then the channel is closed.
func follow[T any](ctx context.Context, w jetstream.KeyWatcher, size int, conv func(jetstream.KeyValueEntry) (T, bool)) <-chan T {
	out := make(chan T, size)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				ev, ok := conv(e)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// WatchLaneRecords streams the names of the design's lanes whose records
// change, so that a lane waiting for its holder's hand-over tries again
// at once.
func WatchLaneRecords(ctx context.Context, kv jetstream.KeyValue, scope string, timeout time.Duration) (<-chan string, error) {
	w, err := watch(ctx, kv, scope+".l.*", timeout, jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("watching the lane records: %w", err)
	}
	prefix := scope + ".l."
	return follow(ctx, w, 256, func(e jetstream.KeyValueEntry) (string, bool) {
		if e == nil {
			return "", false
		}
		return strings.TrimPrefix(e.Key(), prefix), true
	}), nil
}

// watch starts a KV watch. nats.go waits for the watch's consumer to be
// created under the watch's own context, which lives as long as the watch:
// an answer lost in a cluster (a leader change) would hang it forever. So
// each attempt gets timeout, and a watch that did not start is cancelled.
func watch(ctx context.Context, kv jetstream.KeyValue, keys string, timeout time.Duration, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	var err error
	for try := 0; try < 3; try++ {
		wctx, cancel := context.WithCancel(ctx)
		type result struct {
			w   jetstream.KeyWatcher
			err error
		}
		ch := make(chan result, 1)
		go func() {
			w, err := kv.Watch(wctx, keys, opts...)
			ch <- result{w, err}
		}()
		select {
		case r := <-ch:
			if r.err == nil {
				context.AfterFunc(ctx, cancel) // the watch lives until ctx ends
				return r.w, nil
			}
			cancel()
			err = r.err
		case <-time.After(timeout):
			cancel()
			err = fmt.Errorf("no answer within %s", timeout)
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
	}
	return nil, err
}
