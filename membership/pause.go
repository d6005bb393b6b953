package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pause is who paused a lane with lanes pause, when, until when and why,
// kept in the membership bucket under <scope>.p.<lane>: the server's
// pause says only until when. inspect shows it while the lane is paused.
type Pause struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Until  time.Time `json:"until"` // zero: until resumed
	Reason string    `json:"reason,omitempty"`
}

// PauseKey is the key of a lane's pause record.
func PauseKey(stream, design, lane string) string { return Scope(stream, design) + ".p." + lane }

// RecordPause writes a lane's pause record, creating the membership
// bucket when no worker ever ran (replicas: the stream's, at most 3).
func RecordPause(ctx context.Context, js jetstream.JetStream, stream, design, lane string, p Pause, replicas int) error {
	kv, err := Open(ctx, js, Bucket, min(max(replicas, 1), 3))
	if err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, PauseKey(stream, design, lane), b); err != nil {
		return fmt.Errorf("recording who paused lane %s: %w", lane, err)
	}
	return nil
}

// ForgetPause deletes a lane's pause record; a missing bucket or record
// is no error.
func ForgetPause(ctx context.Context, js jetstream.JetStream, stream, design, lane string) error {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("membership bucket %s: %w", Bucket, err)
	}
	if err := kv.Delete(ctx, PauseKey(stream, design, lane)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forgetting who paused lane %s: %w", lane, err)
	}
	return nil
}
