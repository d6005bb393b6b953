// Package membership is how lanes work instances know of each other and of
// the lanes they serve, in a KV bucket (lanes_work by default): each
// instance's lease (a key with a TTL, renewed every third of it; a life of
// the key is an epoch), each lane's record (the lane's lock: which
// instance holds it under which epoch, since when, how far it got), the
// watches that follow both, and the read that inspect makes of it all.
// The runtime (package work) and inspect (package health) both use it.
package membership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
)

// Bucket is the KV bucket that holds the membership of every design's
// workers in an account (unless another is named): <scope>.m.<instance>
// is an instance's lease, <scope>.l.<lane> a lane's record. <scope> is
// the stream and the design name (Scope).
const Bucket = "lanes_work"

// MarkerTTL is how long the bucket remembers an instance that left or
// whose lease expired (server 2.11+ "limit markers"), so inspect can name it.
const MarkerTTL = time.Hour

// Scope is the key prefix of one design's workers. Stream and design names
// may hold characters a KV key may not, so those are escaped as =XX.
func Scope(stream, design string) string { return escapeKey(stream) + "." + escapeKey(design) }

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

// Open binds the membership bucket, creating it when
// missing with per-key TTLs (LimitMarkerTTL, server 2.11+) and the given
// replicas. Instances that start together race to create it: an attempt
// that gets no answer in a quarter of ctx's time, or finds the bucket's
// stream named but not there yet, is tried again (binding first: the
// create it sent may have succeeded), rather than the instance exiting.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	attempt := time.Second
	if d, ok := ctx.Deadline(); ok {
		attempt = max(time.Until(d)/4, time.Second)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		kv, err := openBucketOnce(actx, js, bucket, replicas)
		cancel()
		// No answer, or a bucket another instance is creating this moment
		// (its stream named but not found yet, in a cluster): try again.
		// A cluster that just started may not place its replicas yet.
		racing := errors.Is(err, context.DeadlineExceeded) || jsapi.IsStreamNotFound(err) || errors.Is(err, jetstream.ErrBucketNotFound) ||
			jsapi.IsNoPeers(err)
		if err == nil || ctx.Err() != nil || !racing {
			return kv, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
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
			LimitMarkerTTL: MarkerTTL,
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
