package jsapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/jsapi"
)

// refusedWith fails unless err is the server's answer with this err_code.
func refusedWith(t *testing.T, what string, err error, code jetstream.ErrorCode) {
	t.Helper()
	e, ok := jsapi.As(err)
	if !ok || e.ErrCode != int(code) || !jsapi.Answered(err) {
		t.Fatalf("%s: want err_code %d, got %#v", what, code, err)
	}
}

// TestStreamWrites: create, read as it is, update and delete a stream,
// and find streams by subject; each refusal is the server's answer.
func TestStreamWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	api := open(t, connect.Options{Server: srv.URL()})
	ctx := context.Background()
	cfg := map[string]any{"name": "S", "subjects": []string{"s.>"}}
	if err := api.CreateStream(ctx, "S", cfg); err != nil {
		t.Fatal(err)
	}
	err := api.CreateStream(ctx, "S", map[string]any{"name": "S", "subjects": []string{"other.>"}})
	refusedWith(t, "a second stream S", err, jetstream.JSErrCodeStreamNameInUse)
	_, js := natstest.Connect(t, srv.URL())
	natstest.Publish(t, js, "s.a", "s.b")

	// The raw config keeps every field the server wrote, to send back.
	info, err := api.StreamInfoRaw(ctx, "S")
	if err != nil || info.State.Msgs != 2 || info.State.LastSeq != 2 {
		t.Fatalf("raw info %+v, %v", info, err)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(info.Config, &body); err != nil || body["retention"] == nil || body["max_msgs"] == nil {
		t.Fatalf("raw config %s, %v", info.Config, err)
	}
	body["description"], _ = json.Marshal("updated")
	if err := api.UpdateStream(ctx, "S", body); err != nil {
		t.Fatal(err)
	}
	if s, err := api.StreamInfo(ctx, "S"); err != nil || s.Config.Description != "updated" || s.State.Msgs != 2 {
		t.Fatalf("after the update: %+v, %v", s, err)
	}
	if err := api.UpdateStream(ctx, "NOPE", map[string]any{"name": "NOPE", "subjects": []string{"n.>"}}); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("updating a missing stream: %#v", err)
	}
	if _, err := api.StreamInfoRaw(ctx, "NOPE"); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("raw info of a missing stream: %#v", err)
	}

	if err := api.CreateStream(ctx, "T", map[string]any{"name": "T", "subjects": []string{"t.*"}}); err != nil {
		t.Fatal(err)
	}
	if names, err := api.StreamNames(ctx, ""); err != nil || fmt.Sprint(names) != "[S T]" {
		t.Fatalf("stream names %v, %v", names, err)
	}
	if names, err := api.StreamNames(ctx, "t.>"); err != nil || fmt.Sprint(names) != "[T]" {
		t.Fatalf("stream names on t.>: %v, %v", names, err)
	}
	if name, err := api.StreamBySubject(ctx, "t.x"); err != nil || name != "T" {
		t.Fatalf("stream of t.x: %q, %v", name, err)
	}
	if _, err := api.StreamBySubject(ctx, "u.x"); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("stream of u.x: %#v", err)
	}
	if _, err := api.StreamBySubject(ctx, ""); err == nil || jsapi.Answered(err) {
		t.Fatalf("stream of no subject: %#v", err)
	}

	if err := api.DeleteStream(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if err := api.DeleteStream(ctx, "T"); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("deleting it again: %#v", err)
	}
	if api.Writes() != 7 || api.RefusedWrites() != 3 {
		t.Fatalf("counted %d writes, %d refused; want 7 and 3", api.Writes(), api.RefusedWrites())
	}
}

// TestConsumerWrites: create, update, create-or-update, pause, resume,
// unpin and delete a consumer; each refusal is the server's answer.
func TestConsumerWrites(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	api := open(t, connect.Options{Server: srv.URL()})
	ctx := context.Background()
	if err := api.CreateStream(ctx, "S", map[string]any{"name": "S", "subjects": []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	lane := map[string]any{"durable_name": "c1", "ack_policy": "explicit", "filter_subject": "s.a", "max_ack_pending": 1}
	info, err := api.CreateConsumer(ctx, "S", "c1", lane)
	if err != nil || info.Name != "c1" || info.Config.FilterSubject != "s.a" || info.Config.MaxAckPending != 1 {
		t.Fatalf("created %+v, %v", info, err)
	}
	if _, err := api.CreateConsumer(ctx, "S", "c1", lane); err != nil {
		t.Fatalf("the same create again: %v", err)
	}
	lane["max_ack_pending"] = 2
	_, err = api.CreateConsumer(ctx, "S", "c1", lane)
	refusedWith(t, "create over another config", err, jetstream.JSErrCodeConsumerExists)

	info, err = api.UpdateConsumer(ctx, "S", "c1", lane)
	if err != nil || info.Config.MaxAckPending != 2 {
		t.Fatalf("updated %+v, %v", info, err)
	}
	lane["deliver_policy"] = "new"
	_, err = api.UpdateConsumer(ctx, "S", "c1", lane)
	refusedWith(t, "an immutable change", err, jetstream.JSErrCodeConsumerCreate)
	_, err = api.UpdateConsumer(ctx, "S", "c2", map[string]any{"durable_name": "c2", "ack_policy": "explicit"})
	refusedWith(t, "updating a missing consumer", err, jetstream.JSErrCodeConsumerDoesNotExist)

	c2 := map[string]any{"durable_name": "c2", "ack_policy": "explicit", "filter_subject": "s.b"}
	if info, err := api.CreateOrUpdateConsumer(ctx, "S", "c2", c2); err != nil || info.Config.FilterSubject != "s.b" {
		t.Fatalf("create or update, new: %+v, %v", info, err)
	}
	c2["filter_subject"] = "s.c"
	if info, err := api.CreateOrUpdateConsumer(ctx, "S", "c2", c2); err != nil || info.Config.FilterSubject != "s.c" {
		t.Fatalf("create or update, existing: %+v, %v", info, err)
	}
	_, err = api.CreateOrUpdateConsumer(ctx, "NOPE", "c2", c2)
	refusedWith(t, "a consumer of a missing stream", err, jetstream.JSErrCodeStreamNotFound)

	until := time.Now().Add(time.Hour)
	if err := api.PauseConsumer(ctx, "S", "c1", until); err != nil {
		t.Fatal(err)
	}
	if info, err := api.ConsumerInfo(ctx, "S", "c1"); err != nil || !info.Paused || info.Config.PauseUntil == nil || !info.Config.PauseUntil.Equal(until) {
		t.Fatalf("paused: %+v, %v", info, err)
	}
	if err := api.PauseConsumer(ctx, "S", "c1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if info, err := api.ConsumerInfo(ctx, "S", "c1"); err != nil || info.Paused {
		t.Fatalf("resumed: %+v, %v", info, err)
	}
	if err := api.PauseConsumer(ctx, "S", "NOPE", until); !jsapi.IsConsumerNotFound(err) {
		t.Fatalf("pausing a missing consumer: %#v", err)
	}

	pinned := map[string]any{"durable_name": "c3", "ack_policy": "explicit", "filter_subject": "s.d",
		"priority_policy": "pinned_client", "priority_groups": []string{"g"}, "priority_timeout": int64(time.Minute)}
	if _, err := api.CreateConsumer(ctx, "S", "c3", pinned); err != nil {
		t.Fatal(err)
	}
	if err := api.UnpinConsumer(ctx, "S", "c3", "g"); err != nil {
		t.Fatalf("unpin: %v", err)
	}
	if err := api.UnpinConsumer(ctx, "S", "c3", "other"); !jsapi.Answered(err) {
		t.Fatalf("unpin of an unknown group: %#v", err)
	}

	if err := api.DeleteConsumer(ctx, "S", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := api.DeleteConsumer(ctx, "S", "c1"); !jsapi.IsConsumerNotFound(err) {
		t.Fatalf("deleting it again: %#v", err)
	}
	if _, err := api.ConsumerInfo(ctx, "S", "c1"); !jsapi.IsConsumerNotFound(err) {
		t.Fatalf("info of a deleted consumer: %#v", err)
	}
}
