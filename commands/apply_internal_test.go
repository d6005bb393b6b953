package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestApplyConfirmationPrompt: on a terminal apply asks; "y" applies, any
// other answer refuses (exit 4) and changes nothing.
func TestApplyConfirmationPrompt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	seed := testutil.ReadDesign(t, seedFile)
	p := func(ackPending int) *planner.Plan {
		return testutil.PlanDesign(t, seed, func(d *planner.Design) { d.Lane.MaxAckPending = ackPending })
	}
	run := func(answer string, ackPending int) error {
		var out, errb strings.Builder
		io := &IO{In: strings.NewReader(answer), Out: &out, Err: &errb, InTTY: true}
		err := runApply(context.Background(), ApplyOptions{IO: io, Plan: p(ackPending), Output: "table",
			Conn: connect.Options{Server: srv.URL()}})
		if answer != "" && !strings.Contains(errb.String(), "Apply these changes to stream ORDERS") {
			t.Fatalf("no prompt: %s", errb.String())
		}
		return err
	}
	if err := run("", 1); err != nil { // a new stream: no question
		t.Fatal(err)
	}
	if err := run("n\n", 2); exitCode(err) != ExitRefused {
		t.Fatalf("answer n: %v", err)
	}
	c, _ := js.Consumer(context.Background(), "ORDERS", "orders-n8-00")
	if c.CachedInfo().Config.MaxAckPending != 1 {
		t.Fatal("changed without confirmation")
	}
	if err := run("y\n", 2); err != nil {
		t.Fatalf("answer y: %v", err)
	}
	c, _ = js.Consumer(context.Background(), "ORDERS", "orders-n8-00")
	if c.CachedInfo().Config.MaxAckPending != 2 {
		t.Fatal("not applied after yes")
	}
}

func partitions(n int) func(*planner.Design) { return func(d *planner.Design) { d.Partitions = n } }

// TestApplyWaitingAtPromptHoldsTheLock: an operator reads the diff of a
// repartition at the prompt while CI applies the same repartition. CI is
// refused at once (exit 4) naming the operator's apply, or, with a lock
// timeout, waits and then finds nothing to do: no apply ever acts on a
// diff another one made stale.
func TestApplyWaitingAtPromptHoldsTheLock(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	conn := connect.Options{Server: srv.URL()}
	quiet := func() *IO { return &IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard} }
	ctx := context.Background()
	if err := runApply(ctx, ApplyOptions{IO: quiet(), Plan: testutil.PlanDesign(t, testutil.ReadDesign(t, seedFile), partitions(8)), Conn: conn, Yes: true, Output: "table"}); err != nil {
		t.Fatal(err)
	}
	p16 := testutil.PlanDesign(t, testutil.ReadDesign(t, seedFile), partitions(16))
	drain := converge.Options{DrainTimeout: time.Minute}

	answer, say := io.Pipe()
	prompt := &testutil.Buffer{}
	operator := make(chan error, 1)
	go func() {
		operator <- runApply(ctx, ApplyOptions{IO: &IO{In: answer, Out: io.Discard, Err: prompt, InTTY: true}, Plan: p16, Conn: conn, Output: "table", Converge: drain})
	}()
	testutil.WaitFor(t, "the operator's prompt", 30*time.Second, func() bool { return strings.Contains(prompt.String(), "Apply these changes") })

	err := runApply(ctx, ApplyOptions{IO: quiet(), Plan: p16, Conn: conn, Yes: true, Output: "table", Converge: drain})
	if exitCode(err) != ExitRefused || !strings.Contains(fmt.Sprint(err), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("CI's apply while the operator holds the prompt: exit %d (%v), want 4 naming the holder", exitCode(err), err)
	}

	// CI waits for the lock once its own try to take it (a create of the
	// lock's key, with an id that is not the operator's) reached the server
	// and was refused: only then does the operator's yes test the wait.
	tries := lockTries(t, srv.URL(), p16.Stream.Name)
	ciOut := &testutil.Buffer{}
	ci := make(chan error, 1)
	go func() {
		ci <- runApply(ctx, ApplyOptions{IO: &IO{In: strings.NewReader(""), Out: ciOut, Err: io.Discard}, Plan: p16, Conn: conn, Yes: true, Output: "table",
			LockWait: time.Minute, Converge: drain})
	}()
	testutil.WaitFor(t, "CI trying to take the operator's lock", 30*time.Second, func() bool { return tries.Load() > 0 })
	say.Write([]byte("y\n"))
	if err := <-operator; err != nil {
		t.Fatalf("the operator's apply: %v", err)
	}
	if err := <-ci; err != nil || !strings.Contains(ciOut.String(), "Nothing to do") {
		t.Fatalf("CI waited for the lock, then must find nothing to do: %v\n%s", err, ciOut)
	}
}

// lockTries counts the tries to take stream's apply lock made from now on
// by anyone but its holder now, as the server receives them: a try writes
// the lock's key with the trier's own id.
func lockTries(t *testing.T, url, stream string) *atomic.Int32 {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, converge.LockBucket)
	if err != nil {
		t.Fatal(err)
	}
	held, err := kv.Get(ctx, lockKeyOf(stream))
	if err != nil {
		t.Fatal(err)
	}
	var holder converge.LockOwner
	if err := json.Unmarshal(held.Value(), &holder); err != nil || holder.ID == "" {
		t.Fatalf("the lock's value %q names no holder: %v", held.Value(), err)
	}
	var n atomic.Int32
	sub, err := nc.Subscribe("$KV."+converge.LockBucket+"."+lockKeyOf(stream), func(m *nats.Msg) {
		var o converge.LockOwner
		if json.Unmarshal(m.Data, &o) == nil && o.ID != holder.ID {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// lockKeyOf is the lock's key for the test streams' plain names.
func lockKeyOf(stream string) string { return "stream." + stream }

// promptWatch records whether the diff had been read from stdout's pipe
// when the prompt was written.
type promptWatch struct {
	diffRead    func() bool
	promptEarly atomic.Bool
	prompted    atomic.Bool
}

func (p *promptWatch) Write(b []byte) (int, error) {
	if strings.Contains(string(b), "Apply these changes") {
		p.prompted.Store(true)
		if !p.diffRead() {
			p.promptEarly.Store(true)
		}
	}
	return len(b), nil
}

// TestApplyPromptComesAfterThePipedDiff: with stdout a pipe (apply ... |
// tee log) and the prompt on the terminal, the prompt must not appear
// before the reader of the pipe has the diff.
func TestApplyPromptComesAfterThePipedDiff(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	conn := connect.Options{Server: srv.URL()}
	ctx := context.Background()
	if err := runApply(ctx, ApplyOptions{IO: &IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, Plan: testutil.PlanDesign(t, testutil.ReadDesign(t, seedFile)), Conn: conn, Yes: true, Output: "table"}); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got testutil.Buffer
	var read atomic.Bool
	go func() {
		time.Sleep(300 * time.Millisecond) // a slow reader
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			got.Write(buf[:n])
			if strings.Contains(got.String(), "Lanes: 8 update") {
				read.Store(true)
			}
			if err != nil {
				return
			}
		}
	}()
	watch := &promptWatch{diffRead: read.Load}
	err = runApply(ctx, ApplyOptions{IO: &IO{In: strings.NewReader("n\n"), Out: w, Err: watch, InTTY: true},
		Plan: testutil.PlanDesign(t, testutil.ReadDesign(t, seedFile), func(d *planner.Design) { d.Lane.AckWait = planner.Duration(time.Minute) }), Conn: conn, Output: "table"})
	w.Close()
	if exitCode(err) != ExitRefused || !watch.prompted.Load() {
		t.Fatalf("want the prompt answered no: %v", err)
	}
	if watch.promptEarly.Load() {
		t.Fatal("the prompt was written before the diff had left the pipe")
	}
}
