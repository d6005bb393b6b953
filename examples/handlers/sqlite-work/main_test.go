package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/examples/handlers/internal/seedtest"
	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/work"
)

// TestSeedInProcess: the program's run against a real server, with the
// seed's set_age updates for alice, bob and carol, five each. The table
// holds each user's last update, no version went down, and the program
// stops when its context ends.
func TestSeedInProcess(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	p := seedtest.Plan(t, 8, 1)
	seedtest.Apply(t, s.URL(), p)
	_, js := natstest.Connect(t, s.URL())
	dbPath := filepath.Join(t.TempDir(), "users.db")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- run(ctx, s.URL(), dbPath, work.Config{Stream: p.Stream.Name, Design: p.Design.Name, Logger: log})
	}()
	pub := seedtest.NewPublisher(js)
	for range 5 {
		for _, u := range []string{"alice", "bob", "carol"} {
			if _, err := pub.Next(u); err != nil {
				t.Fatal(err)
			}
		}
	}
	db, err := users.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	seedtest.WaitRows(t, db, pub, time.Minute)
	seedtest.NoDecrease(t, db)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v, want nil after its context ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its context ending")
	}
}

// TestHandlerTerminatesABadUpdate: a payload that is not a set_age update
// is terminated (retrying cannot help), a database error is retried, and a
// repeated update is acked without a change.
func TestHandlerTerminatesABadUpdate(t *testing.T) {
	t.Parallel()
	db, err := users.Open(filepath.Join(t.TempDir(), "users.db"))
	if err != nil {
		t.Fatal(err)
	}
	h := setAge(db, nil)
	ctx := context.Background()
	var term *work.TermError
	if err := h.Handle(ctx, &work.Msg{Key: "alice", Seq: 1, Attempt: 1, Data: []byte("set_age 3")}); !errors.As(err, &term) {
		t.Errorf("a bad payload: %v, want a work.Term error", err)
	}
	for _, seq := range []uint64{2, 2, 1} {
		if err := h.Handle(ctx, &work.Msg{Key: "alice", Seq: seq, Attempt: 1, Data: []byte(`{"age": 30}`)}); err != nil {
			t.Errorf("seq %d: %v, want nil (acked)", seq, err)
		}
	}
	rows, err := users.Rows(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if rows["alice"] != (users.Row{Age: 30, Version: 2}) {
		t.Errorf("alice %+v, want age 30 at version 2", rows["alice"])
	}
	db.Close()
	if err := h.Handle(ctx, &work.Msg{Key: "alice", Seq: 3, Attempt: 1, Data: []byte(`{"age": 31}`)}); err == nil || errors.As(err, &term) {
		t.Errorf("a closed database: %v, want an error that is retried (not a Term)", err)
	}
}
