package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

func open(t *testing.T, o connect.Options) *jsapi.Client {
	t.Helper()
	conn, err := connect.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return jsapi.New(conn)
}

// TestRequestPath: answers decode, error answers are *Error, requests and
// writes are counted.
func TestRequestPath(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	api := open(t, connect.Options{Server: srv.URL()})
	ctx := context.Background()
	if err := api.Write(ctx, "STREAM.CREATE.S", map[string]any{"name": "S", "subjects": []string{"s.>"}, "allow_direct": true}, nil); err != nil {
		t.Fatal(err)
	}
	info, err := api.StreamInfo(ctx, "S")
	if err != nil || info.Config.Name != "S" || !info.Config.AllowDirect {
		t.Fatalf("stream info %+v, %v", info, err)
	}
	_, err = api.StreamInfo(ctx, "NOPE")
	var e *jsapi.Error
	if !errors.As(err, &e) || e.Code != 404 || e.ErrCode != jsapi.CodeStreamNotFound || !jsapi.IsStreamNotFound(err) {
		t.Fatalf("missing stream: %#v", err)
	}
	if api.Requests() != 3 || api.Writes() != 1 || api.RefusedWrites() != 0 {
		t.Fatalf("counted %d requests, %d writes, %d refused; want 3, 1 and 0", api.Requests(), api.Writes(), api.RefusedWrites())
	}
	// A write the server refuses changed nothing, and is counted so.
	if err := api.Write(ctx, "STREAM.CREATE.T", map[string]any{"name": "T", "subjects": []string{"s.x"}}, nil); err == nil {
		t.Fatal("overlapping subjects accepted")
	}
	if api.Writes() != 2 || api.RefusedWrites() != 1 {
		t.Fatalf("counted %d writes, %d refused; want 2 and 1", api.Writes(), api.RefusedWrites())
	}
}

// TestRequestDeadline: a request nobody answers in time ends at the
// connection's timeout as a connect error of kind timeout, not later.
func TestRequestDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.WithoutJetStream)
	nc, _ := natstest.Connect(t, srv.URL())
	sub, err := nc.SubscribeSync("$JS.API.STREAM.INFO.SILENT") // takes the request, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	conn, err := connect.Dial(context.Background(), connect.Options{Server: srv.URL(), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	_, err = jsapi.New(conn).StreamInfo(context.Background(), "SILENT")
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Kind != connect.KindTimeout {
		t.Fatalf("want a timeout, got %#v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s for a 300ms timeout", took)
	}
}

// TestRequestPermissionFailsAtOnce: a request the user may not publish is
// refused by the server asynchronously; the request fails as permission
// denied at once, not at its deadline.
func TestRequestPermissionFailsAtOnce(t *testing.T) {
	t.Parallel()
	ro := natstest.ReadOnlyJetStream
	ro.Name, ro.Password = "ro", "pw"
	srv := natstest.Start(t, natstest.WithUsers(ro, natstest.User{Name: "admin", Password: "pw"}))
	admin := open(t, connect.Options{Server: srv.URL(), User: "admin", Password: "pw"})
	if err := admin.Write(context.Background(), "STREAM.CREATE.S", map[string]any{"name": "S", "subjects": []string{"s.>"}}, nil); err != nil {
		t.Fatal(err)
	}
	api := open(t, connect.Options{Server: srv.URL(), User: "ro", Password: "pw", Timeout: 20 * time.Second})
	if _, err := api.StreamInfo(context.Background(), "S"); err != nil {
		t.Fatalf("reading is allowed: %v", err)
	}
	start := time.Now()
	err := api.Write(context.Background(), "STREAM.DELETE.S", nil, nil)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Kind != connect.KindPermission {
		t.Fatalf("want permission denied, got %#v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("permission denied after %s: waited for the deadline", took)
	}
}

// TestNoLeaderIsUnavailable: JetStream's "no meta leader" answer (10008)
// is the connection-level unavailable error, which still carries the
// answer. A responder stands in for a leaderless cluster.
func TestNoLeaderIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.WithoutJetStream)
	nc, _ := natstest.Connect(t, srv.URL())
	answer := `{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) { m.Respond([]byte(answer)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	conn, err := connect.Dial(context.Background(), connect.Options{Server: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = jsapi.New(conn).StreamInfo(context.Background(), "S")
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Kind != connect.KindUnavailable || !strings.Contains(ce.Error(), "no leader") {
		t.Fatalf("want unavailable, got %#v", err)
	}
	if !jsapi.IsUnavailable(err) || !jsapi.HasCode(err, jsapi.CodeClusterNotAvailable) {
		t.Fatalf("the answer is lost: %#v", err)
	}
	// The same answer through the jetstream package (KV buckets, the
	// account check) is the same error once connect classifies it.
	_, err = conn.JS.AccountInfo(context.Background())
	if ce := conn.Classify(context.Background(), err); ce.Kind != connect.KindUnavailable || !jsapi.HasCode(ce, jsapi.CodeClusterNotAvailable) {
		t.Fatalf("through the jetstream package: %#v", ce)
	}
}

// TestNextMsgAndSubjects: the head of a filter by direct get and by
// STREAM.MSG.GET agree; past the end is message not found; a direct get
// counts what a filter holds from a sequence on; the subject counts are
// complete.
func TestNextMsgAndSubjects(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	ctx := context.Background()
	for _, direct := range []bool{true, false} {
		name := fmt.Sprintf("S%v", direct)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowDirect: direct}); err != nil {
			t.Fatal(err)
		}
		natstest.Publish(t, js, name+".a", name+".b", name+".a", name+".c")
		api := open(t, connect.Options{Server: srv.URL()})
		m, err := api.NextMsg(ctx, name, 2, name+".a", direct)
		if err != nil || m.Seq != 3 || m.Subject != name+".a" || time.Since(m.Time) > time.Minute {
			t.Fatalf("direct=%v: %+v, %v", direct, m, err)
		}
		if _, err := api.NextMsg(ctx, name, 4, name+".a", direct); !jsapi.IsMessageNotFound(err) {
			t.Fatalf("direct=%v past the end: %v", direct, err)
		}
		stored, err := api.StoredFrom(ctx, name, 2, name+".>", direct)
		if want := (jsapi.Stored{First: 2, Count: 3, Counted: true}); err != nil || !direct && stored.First != 2 || direct && stored != want {
			t.Fatalf("direct=%v: stored from 2: %+v, %v", direct, stored, err)
		}
		if stored, err := api.StoredFrom(ctx, name, 5, name+".a", direct); err != nil || stored != (jsapi.Stored{Counted: true}) {
			t.Fatalf("direct=%v: stored past the end: %+v, %v", direct, stored, err)
		}
		subjects, err := api.Subjects(ctx, name, ">")
		want := map[string]uint64{name + ".a": 2, name + ".b": 1, name + ".c": 1}
		if err != nil || fmt.Sprint(subjects) != fmt.Sprint(want) {
			t.Fatalf("subjects %v, %v", subjects, err)
		}
	}
}

// TestListEachAgreesWithList: the lister's slow path (names, then one
// info each) finds what CONSUMER.LIST finds.
func TestListEachAgreesWithList(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	natstest.CreateLanes(t, js, testutil.Plan(t, "orders", 40))
	api := open(t, connect.Options{Server: srv.URL()})
	ctx := context.Background()
	list, err := api.List(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	each, err := api.ListEach(ctx, "ORDERS", 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Consumers) != 40 || len(each.Consumers) != 40 || len(each.Missing)+len(each.Offline) != 0 {
		t.Fatalf("list %d, each %d (+%d missing, %d offline)", len(list.Consumers), len(each.Consumers), len(each.Missing), len(each.Offline))
	}
	for i, ci := range each.Consumers {
		if ci.Name != list.Consumers[i].Name || ci.Name != planner.LaneName("orders", 40, i) {
			t.Fatalf("consumer %d: %s vs %s", i, ci.Name, list.Consumers[i].Name)
		}
	}
	if _, err := api.ListEach(ctx, "NOPE", 8); !jsapi.IsStreamNotFound(err) {
		t.Fatalf("missing stream: %v", err)
	}
}
