package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/lanes-dev/lanes/jsapi"
)

// Bucket is the KV bucket that holds the membership of every design's
// workers in an account (unless Config.Bucket names another):
// <scope>.m.<instance> is an instance's lease (a key with a TTL, renewed
// every third of it), <scope>.l.<lane> says which instance serves a lane
// and since when. <scope> is the stream and the design name.
const Bucket = "lanes_work"

// markerTTL is how long the bucket remembers an instance that left or
// whose lease expired (server 2.11+ "limit markers"), so inspect can name it.
const markerTTL = time.Hour

// errEvicted: the lease was lost (expired or removed) while running.
var errEvicted = errors.New("membership lease lost")

// memberRecord is a lease's stored value: the fields of Member an
// instance knows of itself (ReadServing adds the rest from the entry).
type memberRecord struct {
	Instance   string    `json:"instance"`
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Started    time.Time `json:"started"`
	DeadLetter string    `json:"dead_letter,omitempty"`
	// Epoch names this life of the key: a new one at each join. Lanes
	// are held under an epoch (LaneServer.Epoch).
	Epoch string `json:"epoch,omitempty"`
}

// scope is the key prefix of one design's workers. Stream and design names
// may hold characters a KV key may not, so those are escaped as =XX.
func scope(stream, design string) string { return escapeKey(stream) + "." + escapeKey(design) }

func escapeKey(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

// openBucket binds the membership bucket (Config.Bucket), creating it when
// missing with per-key TTLs (LimitMarkerTTL, server 2.11+) and the given
// replicas. Instances that start together race to create it: an attempt
// that gets no answer in a quarter of ctx's time is tried again (binding
// first: the create it sent may have succeeded), rather than the instance
// exiting at ctx's deadline.
func openBucket(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	attempt := time.Second
	if d, ok := ctx.Deadline(); ok {
		attempt = max(time.Until(d)/4, time.Second)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		kv, err := openBucketOnce(actx, js, bucket, replicas)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return kv, err
		}
	}
}

func openBucketOnce(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         bucket,
			Description:    "lanes work: which instances serve which lanes",
			History:        1,
			Replicas:       max(replicas, 1),
			LimitMarkerTTL: markerTTL,
		})
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = js.KeyValue(ctx, bucket) // another instance made it first
		}
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			return nil, fmt.Errorf("lanes work needs nats-server 2.11 or newer (per-key TTLs for the membership bucket %s)", bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("membership bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("membership bucket %s: %w", bucket, err)
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.LimitMarkerTTL() == 0 {
		return nil, fmt.Errorf("membership bucket %s exists without per-key TTLs (limit marker TTL): remove it (nats kv del %s) and lanes work recreates it", bucket, bucket)
	}
	return kv, nil
}

// lease is this instance's membership key. Each life of the key (a join)
// is an epoch, named in the key's value: lanes are taken under an epoch,
// and the fence says how long they may be served under it.
type lease struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	key    string
	ttl    time.Duration
	fence  *fence
	member memberRecord
	record []byte // member as stored: its epoch changes with each join
	rev    uint64
}

func newLease(js jetstream.JetStream, kv jetstream.KeyValue, scope string, cfg *Config, f *fence) *lease {
	host, _ := os.Hostname()
	return &lease{js: js, kv: kv, key: scope + ".m." + cfg.Instance, ttl: cfg.Lease, fence: f,
		member: memberRecord{Instance: cfg.Instance, Host: host, PID: os.Getpid(), Started: time.Now().UTC(), DeadLetter: cfg.DeadLetter}}
}

// newEpoch names the next life of the key.
func (l *lease) newEpoch() {
	l.member.Epoch = nuid.Next()
	l.record, _ = json.Marshal(l.member)
}

// join creates the key under a new epoch; it exists only while no other
// live instance holds this name. A name still held by an earlier life of
// this instance (killed before its lease expired) frees itself within a
// lease: join waits that long before it gives up.
func (l *lease) join(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(2*l.ttl + time.Second)
	l.newEpoch()
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		rev, err := l.kv.Create(rctx, l.key, l.record, jetstream.KeyTTL(l.ttl))
		cancel()
		if err == nil {
			l.rev = rev
			l.fence.begin(l.member.Epoch, sent, l.ttl)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("joining the membership (%s %s): %w", l.kv.Bucket(), l.key, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance name %q is held by a live instance (key %s in bucket %s): give each instance its own name", l.member.Instance, l.key, l.kv.Bucket())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// rejoin follows a lease that was lost, or may have been: a renewal that
// lost its compare-and-set, or an epoch that lapsed on this instance's
// clock. If the key is still this epoch's record (an earlier renewal
// succeeded but its answer was lost), nobody saw this instance leave: an
// epoch that has not lapsed carries on with that revision, and one that
// lapsed (its lanes have stopped) is replaced on the same key. Otherwise
// the key expired or was removed, and the instance joins again.
func (l *lease) rejoin(ctx context.Context, timeout time.Duration, log *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	e, err := l.kv.Get(rctx, l.key)
	cancel()
	if err == nil && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == string(l.record) {
		epoch, _ := l.fence.current()
		if l.fence.holds(epoch) {
			l.rev = e.Revision()
			return nil
		}
		l.newEpoch()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		rev, err := l.renewAt(rctx, e.Revision())
		cancel()
		if err == nil {
			l.rev = rev
			l.fence.begin(l.member.Epoch, sent, l.ttl)
			log.Warn("membership lease renewed late: its lanes were given up and are taken again")
			return nil
		}
	}
	log.Warn("membership lease lost (expired or removed): joining again")
	return l.join(ctx, timeout)
}

// renew rewrites the key with a fresh TTL, only if it is still the one this
// instance wrote. A key at another revision that still holds this epoch's
// record means an earlier renewal succeeded but its answer was lost: it is
// renewed from there. A key that expired or was removed means errEvicted,
// and ends the epoch at once.
func (l *lease) renew(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	rev, err := l.renewAt(rctx, l.rev)
	if jsapi.IsWrongLastSequence(err) {
		e, gerr := l.kv.Get(rctx, l.key)
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return gerr
		}
		if gerr != nil || e.Operation() != jetstream.KeyValuePut || string(e.Value()) != string(l.record) {
			l.fence.lose()
			return errEvicted
		}
		sent = time.Now()
		rev, err = l.renewAt(rctx, e.Revision())
	}
	if err != nil {
		return err
	}
	l.rev = rev
	l.fence.extend(l.member.Epoch, sent, l.ttl)
	return nil
}

// renewAt writes the record with the lease's TTL if the key is at rev.
// (KV's Update carries no TTL: the write is published as KV does it.)
func (l *lease) renewAt(ctx context.Context, rev uint64) (uint64, error) {
	ack, err := l.js.Publish(ctx, "$KV."+l.kv.Bucket()+"."+l.key, l.record,
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(l.ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// leave removes the key at once so the others take the lanes now, not a
// lease later; from then on the lanes send no pull request. The delete
// marker itself expires after markerTTL.
func (l *lease) leave(ctx context.Context, timeout time.Duration) error {
	l.fence.leave()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return publishDelete(rctx, l.js, l.kv.Bucket(), l.key, l.rev)
}

// publishDelete writes a KV delete marker that expires, so that keys of
// instances and lanes long gone do not pile up in the bucket.
func publishDelete(ctx context.Context, js jetstream.JetStream, bucket, key string, rev uint64) error {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(markerTTL)}
	if rev > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	_, err := js.PublishMsg(ctx, m, opts...)
	return err
}

// memberEvent is one change seen by the membership watch; a nil-member
// event with initial=true marks the end of the initial snapshot.
type memberEvent struct {
	instance string
	epoch    string // of a live member
	alive    bool
	initial  bool
}

// watchMembers streams the design's member keys: puts are alive members,
// deletes and TTL expiry markers are departures.
func watchMembers(ctx context.Context, kv jetstream.KeyValue, scope string, timeout time.Duration) (<-chan memberEvent, error) {
	w, err := watch(ctx, kv, scope+".m.*", timeout)
	if err != nil {
		return nil, fmt.Errorf("watching the membership: %w", err)
	}
	prefix := scope + ".m."
	return follow(ctx, w, 64, func(e jetstream.KeyValueEntry) (memberEvent, bool) {
		if e == nil {
			return memberEvent{initial: true}, true
		}
		ev := memberEvent{instance: strings.TrimPrefix(e.Key(), prefix), alive: e.Operation() == jetstream.KeyValuePut}
		if ev.alive {
			var rec memberRecord
			_ = json.Unmarshal(e.Value(), &rec) // no epoch: an older lanes work
			ev.epoch = rec.Epoch
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

// watchLaneRecords streams the names of the design's lanes whose records
// change, so that a lane waiting for its holder's hand-over tries again
// at once.
func watchLaneRecords(ctx context.Context, kv jetstream.KeyValue, scope string, timeout time.Duration) (<-chan string, error) {
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
