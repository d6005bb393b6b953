// Package users is the seed's example state: a SQLite table of users and
// their ages, written by set_age updates (msgs.received_from.<user>, a
// JSON payload {"age": N}) with a version check on the message's stream
// sequence, so that a redelivered or older message changes nothing. The
// example handlers (set_age.sh for --exec, the HTTP service for --http,
// the program on the work package) all write it so; docs/effects.md says
// why.
package users

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	_ "modernc.org/sqlite" // a pure-Go SQLite: no C toolchain, one static binary
)

// Schema creates the users table and its change log (see schema.sql).
//
//go:embed schema.sql
var Schema string

// Open opens the SQLite database at path, creating the tables if needed.
// Writers wait up to 5 s for one another (several workers share a file).
func Open(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(Schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create the tables in %s: %w", path, err)
	}
	return db, nil
}

// upsert writes the row only if the update is newer than what the row
// holds: a row's version (the stream sequence of the message that wrote
// it) only grows, and a repeated or older message changes nothing.
const upsert = `INSERT INTO users (id, age, version) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET age = excluded.age, version = excluded.version
WHERE excluded.version > users.version`

// ErrBadUpdate is a payload that is not a set_age update: trying again
// cannot help, so a handler terminates the message.
var ErrBadUpdate = errors.New("not a set_age update")

// Update is a set_age message's payload.
type Update struct {
	Age *int `json:"age"`
}

// Parse reads a set_age payload.
func Parse(payload []byte) (int, error) {
	var u Update
	if err := json.Unmarshal(payload, &u); err != nil || u.Age == nil {
		return 0, fmt.Errorf("%w: want {\"age\": N}, got %.64q", ErrBadUpdate, payload)
	}
	return *u.Age, nil
}

// SetAge applies the set_age update carried by the message at stream
// sequence seq for user id. applied is false when the row already holds
// this update or a later one: a redelivery, or a message older than the
// row, which must not overwrite it.
func SetAge(ctx context.Context, db *sql.DB, id string, seq uint64, payload []byte) (applied bool, err error) {
	age, err := Parse(payload)
	if err != nil {
		return false, err
	}
	res, err := db.ExecContext(ctx, upsert, id, age, int64(seq))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Row is a user's row.
type Row struct {
	Age     int
	Version uint64
}

// Rows reads every user's row.
func Rows(ctx context.Context, db *sql.DB) (map[string]Row, error) {
	rs, err := db.QueryContext(ctx, `SELECT id, age, version FROM users`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	rows := map[string]Row{}
	for rs.Next() {
		var id string
		var r Row
		if err := rs.Scan(&id, &r.Age, &r.Version); err != nil {
			return nil, err
		}
		rows[id] = r
	}
	return rows, rs.Err()
}

// Change is one write of a row whose version went down: an older update
// written over a newer one.
type Change struct {
	N        int64 // its place in the change log
	ID       string
	Was, Now uint64
}

// Decreases lists the changes that took a row's version down. With the
// version check there are none, whatever was redelivered.
func Decreases(ctx context.Context, db *sql.DB) ([]Change, error) {
	rs, err := db.QueryContext(ctx, `SELECT n, id, was, now FROM changes WHERE was IS NOT NULL AND now < was ORDER BY n`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Change
	for rs.Next() {
		var c Change
		if err := rs.Scan(&c.N, &c.ID, &c.Was, &c.Now); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rs.Err()
}
