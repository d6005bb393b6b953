package commands

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// TestApplyConfirmationPrompt: on a terminal apply asks; "y" applies, any
// other answer refuses (exit 4) and changes nothing.
func TestApplyConfirmationPrompt(t *testing.T) {
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p, err := planFor(t)
	if err != nil {
		t.Fatal(err)
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

// planFor plans the seed design with a given max ack pending.
func planFor(t *testing.T) (func(int) *planner.Plan, error) {
	data, err := os.ReadFile("../examples/seed/lanes.yaml")
	if err != nil {
		return nil, err
	}
	return func(ackPending int) *planner.Plan {
		d, err := planner.ParseDesign(data, "lanes.yaml")
		if err != nil {
			t.Fatal(err)
		}
		d.Lane.MaxAckPending = ackPending
		p, err := planner.New(d)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, nil
}
