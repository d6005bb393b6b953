// Command sqlite-work processes the seed design's lanes in its own
// process, with the work package (what `lanes work` runs): each set_age
// update is applied to a SQLite table, version-checked on the message's
// stream sequence, so that a redelivered or older message changes nothing
// (see docs/effects.md).
//
//	go run ./examples/handlers/sqlite-work -db users.db -server nats://127.0.0.1:4222
//
// Run it as many times as you like, on as many machines: the instances
// share the lanes, and take over the lanes of one that stops or dies.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/work"
)

func main() {
	server := flag.String("server", nats.DefaultURL, "the NATS server `URL`")
	dbPath := flag.String("db", "users.db", "the SQLite `file` (created if missing)")
	stream := flag.String("stream", "ORDERS", "the design's `stream`")
	design := flag.String("design", "orders", "the design's `name`")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// SIGTERM or Ctrl-C: the messages in flight finish, the lanes are
	// handed to the other instances, and Run returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *server, *dbPath, work.Config{Stream: *stream, Design: *design, Logger: log}); err != nil {
		log.Error("sqlite-work stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, dbPath string, cfg work.Config) error {
	db, err := users.Open(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	nc, err := nats.Connect(url, nats.Name("sqlite-work"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	w, err := work.New(js, cfg, setAge(db, cfg.Logger))
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// setAge is the handler. A message gives it the key (the user), the
// stream sequence (the update's version) and the attempt (above 1: a
// redelivery, which the version check makes harmless).
func setAge(db *sql.DB, log *slog.Logger) work.Handler {
	return work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
		applied, err := users.SetAge(ctx, db, m.Key, m.Seq, m.Data)
		switch {
		case errors.Is(err, users.ErrBadUpdate):
			return work.Term(err) // retrying cannot help: terminated (or parked, with a dead-letter subject)
		case err != nil:
			return err // retried after a backoff; the key waits
		case !applied && log != nil:
			log.Info("already applied, or older than the row: left out", "key", m.Key, "seq", m.Seq, "attempt", m.Attempt)
		}
		return nil // acked
	})
}
