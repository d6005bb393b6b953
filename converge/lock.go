package converge

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/kvlease"
)

// One apply at a time per stream. Two applies that overlap (an operator
// reading the diff at the prompt while CI applies) would each act on a
// diff the other made stale. The lock is a key per stream in a KV bucket
// with per-key TTL (nats-server 2.11+): it lives on the server even when
// the stream does not exist yet, the holder renews it while it runs and
// deletes it at the end, and a holder that crashed stops renewing, so its
// lock expires after the TTL instead of blocking forever. Terraform's
// state lock is the model; the TTL replaces its force-unlock.

// LockBucket is the KV bucket holding apply locks.
const LockBucket = "lanes_locks"

// DefaultLockTTL is how long a lock outlives a holder that stopped
// renewing it (killed, lost its connection).
const DefaultLockTTL = 30 * time.Second

// LockOwner says who holds a lock.
type LockOwner struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// PIDNamespace tells processes on one host apart from processes in
	// containers that share its host name (Linux: the pid namespace).
	PIDNamespace string    `json:"pid_namespace,omitempty"`
	Design       string    `json:"design"`
	Command      string    `json:"command"`
	Since        time.Time `json:"since"`
	TTL          Seconds   `json:"ttl"`
	ID           string    `json:"id"` // unique per run
}

// Seconds is a duration written as whole seconds.
type Seconds time.Duration

func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(int64(time.Duration(s) / time.Second))
}

func (s *Seconds) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*s = Seconds(time.Duration(n) * time.Second)
	return nil
}

func (o LockOwner) String() string {
	return fmt.Sprintf("%s (pid %d on %s, design %s) since %s", o.Command, o.PID, o.Host, o.Design, o.Since.Local().Format(time.DateTime))
}

// LockOptions say how to take the lock.
type LockOptions struct {
	// TTL: how long the lock outlives a holder that stopped renewing it
	// (whole seconds, at least 1s; 0 means DefaultLockTTL).
	TTL time.Duration
	// Wait is how long to wait for another holder to release it (0:
	// refuse at once).
	Wait time.Duration
	// OnLost is called once if the lock could not be renewed before it
	// expired (another apply may then hold it): stop changing things.
	OnLost func(error)
}

// LockedError: another apply holds the stream's lock. Nothing was changed.
type LockedError struct {
	Stream  string
	Holder  LockOwner
	Renewed time.Time // the holder's last renewal
	Waited  time.Duration

	revision uint64
	value    []byte
}

func (e *LockedError) Error() string {
	wait := "at once"
	if e.Waited >= time.Second {
		wait = "after waiting " + e.Waited.Round(time.Second).String() + " (--lock-timeout)"
	}
	return fmt.Sprintf("stream %s is locked by another apply: %s; refused %s, nothing was changed. Wait for it with --lock-timeout DURATION; if that apply died, its lock expires %s after its last renewal (%s)",
		e.Stream, e.Holder, wait, time.Duration(e.Holder.TTL), e.Renewed.Local().Format(time.TimeOnly))
}

// LockUnsupportedError: the server cannot hold an apply lock (per-key TTL
// needs nats-server 2.11 or newer). Nothing was changed.
type LockUnsupportedError struct{ Err error }

func (e *LockUnsupportedError) Error() string {
	return fmt.Sprintf("cannot take the apply lock: %v. The lock needs nats-server 2.11 or newer (KV per-key TTL); run with --lock=false if nothing else applies to this stream at the same time", e.Err)
}

func (e *LockUnsupportedError) Unwrap() error { return e.Err }

// LockLostError: the lock could not be renewed in time; apply stopped.
type LockLostError struct {
	Stream string
	Err    error
}

func (e *LockLostError) Error() string {
	return fmt.Sprintf("lost the apply lock of stream %s (%v): stopped, another apply may hold it now", e.Stream, e.Err)
}

func (e *LockLostError) Unwrap() error { return e.Err }

// Lock is a held apply lock; Release it when done.
type Lock struct {
	conn   *connect.Conn
	kv     jetstream.KeyValue
	stream string
	key    string
	owner  LockOwner
	ttl    time.Duration
	onLost func(error)
	lease  *kvlease.Lease // touched by the renewing goroutine only, until it stops

	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	stopped bool
}

// AcquireLock takes the apply lock of a stream for owner, waiting up to
// o.Wait for another holder, and renews it until Release.
func AcquireLock(ctx context.Context, conn *connect.Conn, stream string, owner LockOwner, o LockOptions) (*Lock, error) {
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultLockTTL
	}
	ttl = max(ttl.Round(time.Second), time.Second)
	ctx, cancel := conn.Guard(ctx) // a permission denial fails at once
	defer cancel()
	kv, err := lockBucket(ctx, conn)
	if err != nil {
		return nil, err
	}
	owner.TTL = Seconds(ttl)
	owner.ID = rand.Text()
	if owner.PIDNamespace == "" {
		owner.PIDNamespace = pidNamespace()
	}
	if owner.Since.IsZero() {
		owner.Since = time.Now()
	}
	value, _ := json.Marshal(owner)
	l := &Lock{conn: conn, kv: kv, stream: stream, key: LockKey(stream), owner: owner, ttl: ttl, onLost: o.OnLost,
		stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	for {
		rctx, cancel := conn.Ctx(ctx)
		lease, err := kvlease.Acquire(rctx, conn.JS, kv, l.key, value, ttl)
		cancel()
		if err == nil {
			l.lease = lease
			go l.renew()
			return l, nil
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) && time.Since(start) < 2*conn.Timeout {
			// The bucket was just created in a cluster and its stream has
			// no leader yet: that takes a moment.
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if !errors.Is(err, kvlease.ErrHeld) {
			return nil, lockError(ctx, conn, err)
		}
		held, err := l.holder(ctx)
		if err != nil {
			return nil, err
		}
		if held == nil {
			continue // it expired or was released just now
		}
		if l.diedHere(held.Holder) {
			// Its process is gone (killed): take the lock over, on the
			// condition that nobody else did first.
			l.lease = kvlease.Adopt(conn.JS, kv, l.key, held.value, ttl, held.revision)
			rctx, cancel := conn.Ctx(ctx)
			err := l.lease.Replace(rctx, value)
			cancel()
			if err == nil {
				go l.renew()
				return l, nil
			}
			continue
		}
		if waited := time.Since(start); waited >= o.Wait {
			held.Waited = waited
			return nil, held
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(min(500*time.Millisecond, o.Wait-time.Since(start))):
		}
	}
}

// holder reads who holds the lock; nil when nobody does any more.
func (l *Lock) holder(ctx context.Context) (*LockedError, error) {
	rctx, cancel := l.conn.Ctx(ctx)
	defer cancel()
	e, err := l.kv.Get(rctx, l.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, lockError(ctx, l.conn, err)
	}
	held := &LockedError{Stream: l.stream, Renewed: e.Created(), revision: e.Revision(), value: e.Value()}
	if json.Unmarshal(e.Value(), &held.Holder) != nil {
		held.Holder = LockOwner{Command: "an unknown holder", Host: "?", Design: "?"}
	}
	return held, nil
}

// diedHere reports whether a holder ran on this host, in this pid
// namespace, and its process no longer exists: killed without releasing.
func (l *Lock) diedHere(h LockOwner) bool {
	return h.Host != "" && h.Host == l.owner.Host && h.PIDNamespace != "" && h.PIDNamespace == l.owner.PIDNamespace &&
		h.PID > 0 && h.PID != l.owner.PID && !processAlive(h.PID)
}

// renew renews the lock every third of the TTL, on the condition that it
// is still ours. It gives up when a renewal finds it lost (someone else
// took the lock) or none succeeded for a whole TTL.
func (l *Lock) renew() {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := l.conn.Ctx(context.Background())
		err := l.lease.Renew(ctx)
		cancel()
		if err == nil {
			renewed = time.Now()
		}
		if err != nil && (errors.Is(err, kvlease.ErrLost) || time.Since(renewed) >= l.ttl) {
			if l.onLost != nil {
				l.onLost(&LockLostError{Stream: l.stream, Err: err})
			}
			return
		}
	}
}

// Release stops renewing and deletes the lock if it is still ours (one
// that expired and was taken by another apply is not ours to delete).
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	l.stopped = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	ctx, cancel := l.conn.Ctx(ctx)
	defer cancel()
	if err := l.lease.Release(ctx, 0); !errors.Is(err, kvlease.ErrLost) {
		return err
	}
	return nil
}

// lockBucket opens the lock bucket, creating it on first use: file
// storage, one value per key, per-key TTL; three replicas in a cluster of
// three or more.
func lockBucket(ctx context.Context, conn *connect.Conn) (jetstream.KeyValue, error) {
	rctx, cancel := conn.Ctx(ctx)
	defer cancel()
	kv, err := conn.JS.KeyValue(rctx, LockBucket)
	if err == nil {
		st, err := kv.Status(rctx)
		if err != nil {
			return nil, lockError(ctx, conn, err)
		}
		if st.LimitMarkerTTL() <= 0 {
			return nil, &LockUnsupportedError{Err: fmt.Errorf("bucket %s exists without per-key TTL (limit marker TTL)", LockBucket)}
		}
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, lockError(ctx, conn, err)
	}
	replicas := 1
	if t := TopologyOf(conn); t.Clustered && t.Servers >= 3 {
		replicas = 3
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:         LockBucket,
		Description:    "lanes apply: one lock per stream (key), renewed while an apply runs",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: time.Second,
	}
	kv, err = conn.JS.CreateKeyValue(rctx, cfg)
	// Right after a cluster (re)starts its meta leader may not know every
	// node yet, and cannot place the replicas: that passes in moments.
	for wait := 100 * time.Millisecond; jsapi.IsNoPeers(err) && rctx.Err() == nil; wait = min(2*wait, time.Second) {
		select {
		case <-rctx.Done():
		case <-time.After(wait):
			kv, err = conn.JS.CreateKeyValue(rctx, cfg)
		}
	}
	if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return conn.JS.KeyValue(rctx, LockBucket) // created by another apply just now
	}
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		return nil, &LockUnsupportedError{Err: err}
	}
	if err != nil {
		return nil, lockError(ctx, conn, err)
	}
	return kv, nil
}

func lockError(ctx context.Context, conn *connect.Conn, err error) error {
	if jsapi.Answered(err) {
		return fmt.Errorf("apply lock (KV bucket %s): %w", LockBucket, err)
	}
	ce := conn.Classify(ctx, err)
	if ce.Kind == connect.KindPermission {
		ce = &connect.Error{Kind: ce.Kind, Err: ce.Err, Msg: ce.Msg + fmt.Sprintf("; the apply lock needs the KV bucket %s (or run with --lock=false)", LockBucket)}
	}
	return ce
}

var validKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)

// LockKey is the KV key of a stream's lock. Stream names cannot contain
// '.', so the two forms never collide.
func LockKey(stream string) string {
	if validKey.MatchString(stream) {
		return "stream." + stream
	}
	return "stream-b64." + base64.RawURLEncoding.EncodeToString([]byte(stream))
}
