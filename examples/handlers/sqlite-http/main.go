// Command sqlite-http is a handler for `lanes work --http`: it applies the
// seed's set_age updates to a SQLite table, version-checked on the
// message's stream sequence (the Lanes-Seq header), so that a redelivered
// or older message changes nothing (see docs/effects.md).
//
//	go run ./examples/handlers/sqlite-http -db users.db -listen 127.0.0.1:8080
//	lanes work -f examples/seed/lanes.yaml --http http://127.0.0.1:8080/
//
// Its answers are what lanes work acts on: 200 acks (the update was
// applied, or the row already holds it or a newer one), 422 terminates (not
// a set_age update: trying again cannot help), 503 retries (the database
// failed).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lanes-dev/lanes/examples/handlers/users"
)

func main() {
	dbPath := flag.String("db", "users.db", "the SQLite `file` (created if missing)")
	listen := flag.String("listen", "127.0.0.1:8080", "the `address` to serve on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := serve(*dbPath, *listen, log); err != nil {
		log.Error("sqlite-http stopped", "error", err)
		os.Exit(1)
	}
}

// serve runs the service until SIGTERM or Ctrl-C, then finishes the
// requests under way.
func serve(dbPath, listen string, log *slog.Logger) error {
	db, err := users.Open(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	srv := &http.Server{Addr: listen, Handler: newService(db, users.SetAge, log), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("serving set_age updates", "listen", listen, "db", dbPath)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// applyFunc writes one update; applied is false when the store already
// holds it or a newer one.
type applyFunc func(ctx context.Context, db *sql.DB, key string, seq uint64, payload []byte) (applied bool, err error)

// service answers lanes work's requests.
type service struct {
	db    *sql.DB
	apply applyFunc
	log   *slog.Logger

	// What it saw, for a test or a metrics endpoint: redelivered messages
	// (attempt above 1) and updates the version check left out.
	Redelivered, Skipped atomic.Int64
}

func newService(db *sql.DB, apply applyFunc, log *slog.Logger) *service {
	return &service{db: db, apply: apply, log: log}
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// lanes work sends the message's key, stream sequence and attempt as
	// headers, the payload as the body.
	key := r.Header.Get("Lanes-Key")
	seq, err := strconv.ParseUint(r.Header.Get("Lanes-Seq"), 10, 64)
	if r.Method != http.MethodPost || key == "" || err != nil {
		http.Error(w, "want a POST from lanes work, with Lanes-Key and Lanes-Seq", http.StatusUnprocessableEntity)
		return
	}
	attempt, _ := strconv.Atoi(r.Header.Get("Lanes-Attempt"))
	if attempt > 1 {
		s.Redelivered.Add(1)
	}
	payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the payload: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	applied, err := s.apply(r.Context(), s.db, key, seq, payload)
	switch {
	case errors.Is(err, users.ErrBadUpdate):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	case err != nil:
		s.log.Warn("cannot apply the update: lanes work retries it", "key", key, "seq", seq, "error", err)
		http.Error(w, "the database failed", http.StatusServiceUnavailable)
		return
	case !applied:
		// A redelivery, or an update older than the row: nothing to do,
		// and it must be acked all the same.
		s.Skipped.Add(1)
		s.log.Info("already applied, or older than the row: left out", "key", key, "seq", seq, "attempt", attempt)
	}
	fmt.Fprintf(w, "ok %s %d\n", key, seq)
}
