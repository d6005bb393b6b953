package commands_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// TestApplyKeysInFlight: lanes apply --keys-in-flight as a user types it.
// The dry run shows the change as one (keys in flight 1 -> 8, updated in
// place; exit 3) and changes nothing; the apply updates the lanes; bad
// values exit 2 naming the field and change nothing; back to 1 is an
// update too.
func TestApplyKeysInFlight(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	design := []string{"--server", srv.URL(), "--subject", "msgs.received_from.*", "--name", "orders", "--partitions", "2"}
	run := func(args ...string) (int, string, string) {
		return lanes(t, append(append([]string{"apply"}, design...), args...)...)
	}
	lane := func() (max int, tag string) {
		t.Helper()
		c, err := js.Consumer(context.Background(), "ORDERS", "orders-n2-01")
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.CachedInfo().Config
		return cfg.MaxAckPending, cfg.Metadata[planner.MetaKeysInFlight]
	}
	if code, out, errs := run("--yes"); code != 0 {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errs)
	}

	code, out, errs := run("--dry-run", "--keys-in-flight", "8")
	if code != commands.ExitChanges || !strings.Contains(out, "keys in flight 1 -> 8: updated in place, the lane keeps its position") ||
		!strings.Contains(out, "orders-n2-00 .. orders-n2-01 (2)  update") || !strings.Contains(out, "Lanes: 2 update.") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = run("--dry-run", "--keys-in-flight", "8", "-o", "json")
	var doc struct {
		Diff struct {
			Lanes []struct {
				Action       string `json:"action"`
				KeysInFlight *struct {
					From int `json:"from"`
					To   int `json:"to"`
				} `json:"keys_in_flight"`
			} `json:"lanes"`
		} `json:"diff"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != commands.ExitChanges || len(doc.Diff.Lanes) != 2 {
		t.Fatalf("dry run JSON: exit %d, %v\n%s", code, err, out)
	}
	for _, l := range doc.Diff.Lanes {
		if l.Action != "update" || l.KeysInFlight == nil || l.KeysInFlight.From != 1 || l.KeysInFlight.To != 8 {
			t.Fatalf("dry run JSON lane %+v", l)
		}
	}
	if max, tag := lane(); max != 1 || tag != "" {
		t.Fatalf("a dry run changed the lane: max ack pending %d, tag %q", max, tag)
	}

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"--keys-in-flight", "0"}, `--keys-in-flight: lane.keys_in_flight "0": must be between 1`},
		{[]string{"--keys-in-flight", "5000"}, `lane.keys_in_flight "5000"`},
		{[]string{"--keys-in-flight", "8", "--max-ack-pending", "4"}, `--max-ack-pending: lane.max_ack_pending "4": is set beside lane.keys_in_flight (8)`},
	} {
		code, out, errs := run(append([]string{"--yes"}, bad.args...)...)
		if code != commands.ExitUsage || !strings.Contains(errs, bad.says) || out != "" {
			t.Errorf("%v: exit %d, want %d saying %q\nstdout: %s\nstderr: %s", bad.args, code, commands.ExitUsage, bad.says, out, errs)
		}
	}
	if max, tag := lane(); max != 1 || tag != "" {
		t.Fatalf("a bad value changed the lane: max ack pending %d, tag %q", max, tag)
	}

	if code, out, errs := run("--yes", "--keys-in-flight", "8"); code != 0 || !strings.Contains(out, "2 lanes updated") {
		t.Fatalf("apply K=8: exit %d\n%s\n%s", code, out, errs)
	}
	if max, tag := lane(); max != 8 || tag != "8" {
		t.Fatalf("K=8: max ack pending %d, tag %q", max, tag)
	}
	if code, out, _ := run("--dry-run", "--keys-in-flight", "8"); code != 0 || !strings.Contains(out, "Nothing to do") {
		t.Fatalf("K=8 again: exit %d\n%s", code, out)
	}
	code, out, errs = run("--yes")
	if code != 0 || !strings.Contains(out, "keys in flight 8 -> 1") || !strings.Contains(out, "2 lanes updated") {
		t.Fatalf("back to 1: exit %d\n%s\n%s", code, out, errs)
	}
	if max, tag := lane(); max != 1 || tag != "" {
		t.Fatalf("K=1 again: max ack pending %d, tag %q", max, tag)
	}
}
