package commands_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestApplyAccountMappingExitCodes: with mapping: account, the first apply
// does all that apply can do and exits 0, warning that publishes reach
// the stream only once the operator installs the mapping (no re-run can
// check it, so exit 5 would never clear); a re-run has nothing to do. A
// repartition is left halfway (exit 5, re-run to continue) until the
// operator installs the new mapping and re-runs with --mapping-switched.
func TestApplyAccountMappingExitCodes(t *testing.T) {
	cleanEnv(t)
	ctx := context.Background()
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	apply := func(partitions int, extra ...string) (int, string, string) {
		t.Helper()
		return lanes(t, append([]string{"apply", "--server", srv.URL(), "--name", "acct", "--subject", "acct.received_from.*",
			"--mapping", "account", "--partitions", strconv.Itoa(partitions), "--yes"}, extra...)...)
	}
	install := func(partitions int) {
		t.Helper()
		p := testutil.Plan(t, "acct", partitions, func(d *planner.Design) { d.Mapping = planner.MappingAccount })
		if err := srv.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := apply(2)
	if code != commands.ExitOK || !strings.Contains(out, "stream created; 2 lanes created") ||
		!strings.Contains(out, "warning: publishes to acct.received_from.* reach stream ACCT only once the operator installs the account mapping") {
		t.Fatalf("first apply: exit %d, want 0 with the mapping warning\n%s\n%s", code, out, errs)
	}
	code, out, _ = apply(2, "-o", "json")
	if code != commands.ExitOK || !strings.Contains(out, `"status": "nothing_to_do"`) || !strings.Contains(out, `"account_mapping"`) {
		t.Fatalf("second apply: exit %d, want 0, nothing to do, the mapping still shown\n%s", code, out)
	}

	// The warning is true: until the mapping is installed, nothing is stored.
	if _, err := js.Publish(ctx, "acct.received_from.alice", nil); err == nil {
		t.Fatal("a publish was stored before the account mapping was installed")
	}
	install(2)
	natstest.Publish(t, js, "acct.received_from.alice")
	s, err := js.Stream(ctx, "ACCT")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil { // nothing for the repartition to wait for
		t.Fatal(err)
	}

	code, _, errs = apply(4)
	if code != commands.ExitIncomplete || !strings.Contains(errs, "--mapping-switched") {
		t.Fatalf("repartition before the new mapping: exit %d, want 5 naming --mapping-switched\n%s", code, errs)
	}
	install(4)
	if code, out, errs = apply(4, "--mapping-switched"); code != commands.ExitOK {
		t.Fatalf("repartition after the new mapping: exit %d, want 0\n%s\n%s", code, out, errs)
	}
}
