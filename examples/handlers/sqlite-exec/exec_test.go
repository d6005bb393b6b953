//go:build unix

// The tests of set_age.sh against a real sqlite3 shell: run directly, as
// lanes work runs it (environment and stdin), and end to end under
// `lanes work --exec` on an embedded nats-server.
package sqliteexec_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/examples/handlers/users"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

const (
	schemaFile = "../users/schema.sql"
	seedDesign = "../../seed/lanes.yaml"
)

// requireEnv makes a missing sqlite3 fail the test instead of skipping it
// (CI sets it: .ci/run installs sqlite3).
const requireEnv = "LANES_REQUIRE_SQLITE3"

// needSQLite3 skips the test when the sqlite3 shell is not installed,
// unless LANES_REQUIRE_SQLITE3=1 asks for it.
func needSQLite3(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("sqlite3 is not on PATH and %s=1: install it (Debian: apt-get install sqlite3): %v", requireEnv, err)
		}
		t.Skipf("sqlite3 is not on PATH (Debian: apt-get install sqlite3; %s=1 makes this a failure): %v", requireEnv, err)
	}
}

// script is set_age.sh's absolute path: lanes work and exec.Command run
// it from anywhere.
func script(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("set_age.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newDB creates a database as docs/effects.md says to:
// sqlite3 users.db < examples/handlers/users/schema.sql.
func newDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.db")
	schema, err := os.Open(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer schema.Close()
	cmd := exec.Command("sqlite3", path)
	cmd.Stdin = schema
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqlite3 %s < %s: %v\n%s", path, schemaFile, err, out)
	}
	return path
}

// openDB opens the database for the test's reads (users.Open: the tables
// exist already, its CREATE IF NOT EXISTS changes nothing).
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := users.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// ran is one run of set_age.sh.
type ran struct {
	code           int
	stdout, stderr string
}

// msg is a set_age message as lanes work hands it to the handler.
type msg struct {
	key     string
	seq     uint64
	payload string
}

func setAge(key string, seq uint64, age int) msg {
	return msg{key, seq, fmt.Sprintf(`{"age": %d}`, age)}
}

// run runs set_age.sh on m as lanes work would (the payload on stdin, the
// LANES_* variables), with env on top (USERS_DB).
func run(t *testing.T, m msg, env ...string) ran {
	t.Helper()
	r, err := runScript(script(t), m, env...)
	if err != nil {
		t.Fatalf("run set_age.sh: %v", err)
	}
	return r
}

// runScript is run without a test: for goroutines, which must not end the
// test. err is a script that could not be run, not its exit code.
func runScript(path string, m msg, env ...string) (ran, error) {
	cmd := exec.Command(path)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"LANES_STREAM=ORDERS",
		"LANES_KEY=" + m.key,
		fmt.Sprintf("LANES_SEQ=%d", m.seq),
		"LANES_ATTEMPT=1",
	}, env...)
	cmd.Stdin = strings.NewReader(m.payload)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	r := ran{stdout: out.String(), stderr: errs.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.code, err = exit.ExitCode(), nil
	}
	return r, err
}

// mustApply runs m and fails the test unless set_age.sh exits 0 and says
// that it wrote the row (written) or that it did not.
func mustApply(t *testing.T, db string, m msg, written bool) {
	t.Helper()
	r := run(t, m, "USERS_DB="+db)
	if r.code != 0 {
		t.Fatalf("%s #%d %s: exit %d\n%s", m.key, m.seq, m.payload, r.code, r.stderr)
	}
	if got := strings.HasSuffix(r.stdout, ": written\n"); got != written {
		t.Errorf("%s #%d %s: written %v, want %v: %q", m.key, m.seq, m.payload, got, written, r.stdout)
	}
}

// change is a row of the change log.
type change struct {
	id       string
	was, now sql.NullInt64
}

func changes(t *testing.T, db *sql.DB) []change {
	t.Helper()
	rs, err := db.Query(`SELECT id, was, now FROM changes ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []change
	for rs.Next() {
		var c change
		if err := rs.Scan(&c.id, &c.was, &c.now); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func rows(t *testing.T, db *sql.DB) map[string]users.Row {
	t.Helper()
	r, err := users.Rows(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkRows fails the test unless the table is want, and the audit finds
// no version that went down.
func checkRows(t *testing.T, db *sql.DB, want map[string]users.Row) {
	t.Helper()
	if got := rows(t, db); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows:\n got %v\nwant %v", got, want)
	}
	down, err := users.Decreases(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(down) > 0 {
		t.Errorf("versions went down: %+v", down)
	}
}

// TestSetAgeKeepsTheLastUpdate: the seed's example, set_age updates for
// alice, bob and carol, run in order, then all again (redeliveries), then
// the older ones backwards (late writes from a handler that lost its
// lane): the table holds each user's last update, and only the first run
// of each message wrote anything.
func TestSetAgeKeepsTheLastUpdate(t *testing.T) {
	t.Parallel()
	needSQLite3(t)
	path := newDB(t)
	db := openDB(t, path)
	// Stream sequences as one stream gives them: interleaved keys.
	updates := []msg{
		setAge("alice", 1, 30), setAge("bob", 2, 40), setAge("carol", 3, 50),
		setAge("alice", 4, 31), setAge("carol", 5, 51), setAge("bob", 6, 41),
		setAge("alice", 7, 32), setAge("carol", 8, 52),
	}
	for _, m := range updates {
		mustApply(t, path, m, true)
	}
	want := map[string]users.Row{
		"alice": {Age: 32, Version: 7},
		"bob":   {Age: 41, Version: 6},
		"carol": {Age: 52, Version: 8},
	}
	checkRows(t, db, want)

	for _, m := range updates { // redelivered, in order
		mustApply(t, path, m, false)
	}
	for i := len(updates) - 1; i >= 0; i-- { // and out of order
		mustApply(t, path, updates[i], false)
	}
	// An older update with another age: still not written.
	mustApply(t, path, setAge("alice", 4, 99), false)
	checkRows(t, db, want)
	if n := len(changes(t, db)); n != len(updates) {
		t.Errorf("%d writes in the change log, want %d: one per message, none for a redelivery", n, len(updates))
	}

	// A newer update is written, over a row that has seen all the above.
	mustApply(t, path, setAge("bob", 9, 42), true)
	want["bob"] = users.Row{Age: 42, Version: 9}
	checkRows(t, db, want)
}

// TestSetAgeTerminatesBadMessages: a payload without an integer age, or
// a LANES_SEQ that is not a number, exits 65 (lanes work terminates the
// message, no retry) with a message on stderr, and changes nothing.
func TestSetAgeTerminatesBadMessages(t *testing.T) {
	t.Parallel()
	needSQLite3(t)
	path := newDB(t)
	db := openDB(t, path)
	mustApply(t, path, setAge("alice", 1, 30), true)
	want := map[string]users.Row{"alice": {Age: 30, Version: 1}}
	for _, tc := range []struct {
		name    string
		payload string
		seq     string
		say     string
	}{
		{"a string age", `{"age": "31"}`, "2", "not a set_age update"},
		{"a fraction", `{"age": 31.5}`, "2", "not a set_age update"},
		{"an exponent", `{"age": 3e1}`, "2", "not a set_age update"},
		{"no age", `{"name": "alice"}`, "2", "not a set_age update"},
		{"no value", `{"age": }`, "2", "not a set_age update"},
		{"too big", `{"age": 12345678901234567890}`, "2", "not a set_age update"},
		{"not JSON", "age=31", "2", "not a set_age update"},
		{"SQL", `{"age": 1); DROP TABLE users; --}`, "2", "not a set_age update"},
		{"empty", "", "2", "not a set_age update"},
		{"backslashes", `\c{"age": x}\n`, "2", `got "\c{"age": x}\n"`},
		{"seq not a number", `{"age": 31}`, "2x", `LANES_SEQ="2x" is not a stream sequence`},
		{"seq negative", `{"age": 31}`, "-2", "is not a stream sequence"},
		{"seq SQL", `{"age": 31}`, "2); DROP TABLE users; --", "is not a stream sequence"},
		{"seq empty", `{"age": 31}`, "", `LANES_SEQ="" is not a stream sequence`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(script(t))
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "USERS_DB=" + path, "LANES_KEY=alice", "LANES_SEQ=" + tc.seq}
			cmd.Stdin = strings.NewReader(tc.payload)
			var errs bytes.Buffer
			cmd.Stderr = &errs
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 65 {
				t.Errorf("exit %v, want 65 (terminate)\n%s", err, errs.String())
			}
			if !strings.Contains(errs.String(), tc.say) {
				t.Errorf("stderr %q does not say %q", errs.String(), tc.say)
			}
			checkRows(t, db, want)
		})
	}
	if n := len(changes(t, db)); n != 1 {
		t.Errorf("%d writes in the change log, want 1", n)
	}
}

// TestSetAgeAcceptsItsPayloads: what the sed match takes for {"age": N}.
func TestSetAgeAcceptsItsPayloads(t *testing.T) {
	t.Parallel()
	needSQLite3(t)
	path := newDB(t)
	db := openDB(t, path)
	for i, tc := range []struct {
		payload string
		age     int
	}{
		{`{"age": 31}`, 31},
		{`{"age":32}`, 32},
		{"{\n  \"age\" :\t33\n}\n", 33},
		{`{"name": "alice", "age": 34, "city": "Lyon"}`, 34},
		{`{"age": -1}`, -1},
		{`{"age": 0}`, 0},
	} {
		mustApply(t, path, msg{"alice", uint64(i + 1), tc.payload}, true)
		if got := rows(t, db)["alice"]; got.Age != tc.age {
			t.Errorf("%q: age %d, want %d", tc.payload, got.Age, tc.age)
		}
	}
}

// TestSetAgeEscapesTheKey: a key is a subject token and may hold a single
// quote (or SQL): it is written as it is.
func TestSetAgeEscapesTheKey(t *testing.T) {
	t.Parallel()
	needSQLite3(t)
	path := newDB(t)
	db := openDB(t, path)
	keys := []string{"o'brien", "x');DROP_TABLE_users;--", `''`, `back\slash`, `"dq"`}
	want := map[string]users.Row{}
	for i, k := range keys {
		mustApply(t, path, setAge(k, uint64(i+1), 20+i), true)
		want[k] = users.Row{Age: 20 + i, Version: uint64(i + 1)}
	}
	mustApply(t, path, setAge("o'brien", 1, 99), false) // the check works on such keys too
	checkRows(t, db, want)
}

// TestSetAgeRetriesWhatIsNotTheMessage: a missing setup or a database
// that sqlite3 cannot write exits 1 (lanes work retries the message after
// its backoff), never 0 (the message would be acked unwritten) nor 65 (it
// would be dropped).
func TestSetAgeRetriesWhatIsNotTheMessage(t *testing.T) {
	t.Parallel()
	needSQLite3(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db") // a database without the tables
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := setAge("alice", 1, 30)
	for _, tc := range []struct {
		name string
		m    msg
		env  []string
		say  string
	}{
		{"USERS_DB unset", m, nil, "USERS_DB is not set"},
		{"USERS_DB empty", m, []string{"USERS_DB="}, "USERS_DB is not set"},
		{"no such file", m, []string{"USERS_DB=" + filepath.Join(dir, "nosuch.db")}, "nosuch.db: no such file (create it with: sqlite3"},
		{"no tables", m, []string{"USERS_DB=" + empty}, "no such table: users"},
		{"no key", msg{"", 1, m.payload}, []string{"USERS_DB=" + empty}, "LANES_KEY is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.m, tc.env...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1 (retry)\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.say) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.say)
			}
		})
	}
}

// TestSetAgeBusyDatabase: several workers write one file. While another
// writer holds the lock, set_age.sh waits for it (.timeout 5000); a lock
// held past the wait is an error, retried (exit 1), the row unwritten.
func TestSetAgeBusyDatabase(t *testing.T) {
	t.Parallel()
	needSQLite3(t)

	t.Run("concurrent writers", func(t *testing.T) {
		t.Parallel()
		const n = 16
		path, sh := newDB(t), script(t)
		db := openDB(t, path)
		want := map[string]users.Row{}
		var wg sync.WaitGroup
		failed := make(chan string, n)
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("user%02d", i)
			want[key] = users.Row{Age: i, Version: uint64(i + 1)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := runScript(sh, setAge(key, uint64(i+1), i), "USERS_DB="+path)
				if err != nil || r.code != 0 {
					failed <- fmt.Sprintf("%s: exit %d (%v): %s", key, r.code, err, r.stderr)
				}
			}()
		}
		wg.Wait()
		close(failed)
		for f := range failed {
			t.Error(f)
		}
		checkRows(t, db, want)
	})

	t.Run("locked past the timeout", func(t *testing.T) {
		t.Parallel()
		path := newDB(t)
		db := openDB(t, path)
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil { // the write lock, held until the script gave up
			t.Fatal(err)
		}
		start := time.Now()
		r := run(t, setAge("alice", 1, 30), "USERS_DB="+path)
		waited := time.Since(start)
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "database is locked") {
			t.Errorf("exit %d, want 1 (retry) on a locked database\n%s", r.code, r.stderr)
		}
		// It waited rather than failing at once: a lower bound only, which
		// a loaded machine cannot break.
		if waited < 4*time.Second {
			t.Errorf("gave up after %s, want the 5 s busy wait", waited)
		}
		checkRows(t, db, map[string]users.Row{})
	})
}

// TestLanesWorkExec runs set_age.sh under the real `lanes work --exec` on
// the seed design, applied by `lanes apply` to an embedded nats-server:
// set_age updates for alice, bob and carol (several each, one repeated,
// and a bad one) end with each user's last published update in the table,
// every good message written once, and no version that went down.
func TestLanesWorkExec(t *testing.T) {
	needSQLite3(t)
	// The connection comes from the flags alone: no NATS_* variable or
	// natscli context of the machine running the test (t.Setenv: this test
	// cannot be parallel).
	for _, v := range []string{"LANES_FILE", "NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CERT", "NATS_KEY", "NATS_CA"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	url := natstest.Start(t).URL()
	path := newDB(t)
	db := openDB(t, path)

	var out, errs testutil.Buffer
	if code := commands.Main([]string{"lanes", "apply", "-f", seedDesign, "--ack-wait", "5s", "--yes", "-s", url}, strings.NewReader(""), &out, &errs); code != 0 {
		t.Fatalf("lanes apply: exit %d\n%s\n%s", code, out.String(), errs.String())
	}

	// As a user would write it: the database for the handler in front of
	// the script, quoted for sh -c.
	handler := "USERS_DB='" + strings.ReplaceAll(path, "'", `'\''`) + "' " + script(t)
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	var wout, werr testutil.Buffer
	go func() {
		code <- commands.MainContext(ctx, []string{"lanes", "work", "-f", seedDesign, "-s", url, "--exec", handler, "--instance", "exec-1"}, strings.NewReader(""), &wout, &werr)
	}()
	stopped := false
	stop := func() int {
		t.Helper()
		cancel() // as a first SIGTERM: finish what is in flight, hand over, exit 0
		select {
		case c := <-code:
			stopped = true
			return c
		case <-time.After(60 * time.Second):
			t.Fatalf("lanes work did not stop within 60s\n%s", werr.String())
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})

	_, js := natstest.Connect(t, url)
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	want := map[string]users.Row{}
	good := 0
	publish := func(user, payload string) {
		t.Helper()
		ack, err := js.Publish(pctx, "msgs.received_from."+user, []byte(payload), jetstream.WithExpectStream("ORDERS"))
		if err != nil {
			t.Fatalf("publish to %s: %v", user, err)
		}
		if age, err := users.Parse([]byte(payload)); err == nil {
			want[user] = users.Row{Age: age, Version: ack.Sequence}
			good++
		}
	}
	for round, ages := range [][3]int{{30, 40, 50}, {31, 41, 51}, {32, 42, 52}} {
		for i, user := range []string{"alice", "bob", "carol"} {
			publish(user, fmt.Sprintf(`{"age": %d}`, ages[i]))
		}
		if round == 1 {
			publish("bob", `{"age": "forty-one"}`) // terminated (exit 65); bob goes on
		}
	}
	publish("alice", `{"age": 33}`) // two updates in a row: the second wins
	publish("carol", `{"age": 52}`) // the same payload again, a newer message
	publish("alice", `{"age": 34}`)
	publish("carol", `{"age": 53}`)

	testutil.WaitFor(t, "the table to hold every user's last update", 2*time.Minute, func() bool {
		got, err := users.Rows(context.Background(), db)
		return err == nil && fmt.Sprint(got) == fmt.Sprint(want)
	})
	if c := stop(); c != 0 {
		t.Fatalf("lanes work: exit %d\n%s", c, werr.String())
	}
	checkRows(t, db, want)

	// Each good message wrote once, in its key's order: a repeated write
	// (a redelivery) changes nothing, and an older one after a newer one
	// would have been refused, leaving fewer writes.
	log := changes(t, db)
	if len(log) != good {
		t.Errorf("%d writes in the change log, want %d (one per good message)", len(log), good)
	}
	last := map[string]int64{}
	for _, c := range log {
		if c.now.Int64 <= last[c.id] {
			t.Errorf("%s: version %d written after %d", c.id, c.now.Int64, last[c.id])
		}
		last[c.id] = c.now.Int64
	}
	if e := werr.String(); !strings.Contains(e, "terminated by the handler") || !strings.Contains(e, "not a set_age update") {
		t.Errorf("lanes work's log does not show the bad update terminated:\n%s", e)
	}
	if o := wout.String(); strings.Count(o, ": written\n") != good {
		t.Errorf("the handlers' output shows %d writes, want %d:\n%s", strings.Count(o, ": written\n"), good, o)
	}
}
