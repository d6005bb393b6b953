package commands_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
)

// pausedLanes counts the stream's paused consumers, as the server says.
func pausedLanes(t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	l := s.ListConsumers(context.Background())
	for ci := range l.Info() {
		if ci.Paused {
			n++
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPauseAndResumeCommands: the dry runs exit 3 and change nothing, the
// actions change every lane once (a re-run has nothing to do), -o json is
// the outcome, and every bad input exits 2 with one clear line and
// nothing paused.
func TestPauseAndResumeCommands(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "orders", 4)
	natstest.CreateLanes(t, js, p)
	at := []string{"--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name}
	lanesAt := func(args ...string) (int, string, string) {
		t.Helper()
		return lanes(t, append(args, at...)...)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--lanes", "nope"}, `no lane "nope"`},
		{[]string{"pause", "--lanes", "1,"}, "empty lane name"},
		{[]string{"pause", "--until", "2001-01-01T00:00:00Z"}, "not in the future"},
		{[]string{"pause", "--until", "tomorrow"}, "not a time"},
		{[]string{"pause", "--until", "15:30", "--for", "1m"}, "give one"},
		{[]string{"pause", "--for", "-1m"}, "positive"},
		{[]string{"pause", "--key", ""}, "empty key"},
		{[]string{"resume", "extra"}, "takes no arguments"},
	} {
		code, _, errs := lanesAt(tc.args...)
		if code != commands.ExitUsage || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", tc.args, code, errs, tc.want)
		}
	}
	if code, _, errs := lanes(t, "pause", "--server", srv.URL(), "--stream", p.Stream.Name, "--design", "other"); code != commands.ExitUsage || !strings.Contains(errs, `design "other" has no lanes`) {
		t.Errorf("unknown design: exit %d %s", code, errs)
	}
	if n := pausedLanes(t, js, p.Stream.Name); n != 0 {
		t.Fatalf("%d lanes paused by bad input", n)
	}

	code, out, errs := lanesAt("pause", "--dry-run", "--lanes", "0,1", "--reason", "checking")
	if code != commands.ExitChanges || !strings.Contains(out, "pause: 2 of 2 lane(s) of orders on ORDERS would change") || strings.Count(out, "paused until resumed") != 2 {
		t.Fatalf("pause --dry-run: exit %d\n%s%s", code, out, errs)
	}
	if n := pausedLanes(t, js, p.Stream.Name); n != 0 {
		t.Fatalf("the dry run paused %d lanes", n)
	}
	code, out, errs = lanesAt("pause", "--for", "1h", "--by", "ops", "-o", "json")
	var doc struct {
		Action  string `json:"action"`
		Changed int    `json:"changed"`
		Lanes   []struct {
			Lane    string `json:"lane"`
			After   string `json:"after"`
			Changed bool   `json:"changed"`
		} `json:"lanes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || doc.Action != "pause" || doc.Changed != 4 || len(doc.Lanes) != 4 {
		t.Fatalf("pause -o json: exit %d %v\n%s%s", code, err, out, errs)
	}
	if n := pausedLanes(t, js, p.Stream.Name); n != 4 {
		t.Fatalf("%d lanes paused, want 4", n)
	}
	code, out, _ = lanesAt("inspect", "-o", "json")
	if code != 0 || strings.Count(out, `"paused_by":{"by":"ops"`) != 4 {
		t.Errorf("inspect -o json does not say who paused (exit %d):\n%s", code, out)
	}
	if code, out, _ := lanesAt("resume", "--dry-run", "--key", "k1"); code != commands.ExitChanges || !strings.Contains(out, "resume: 1 of 1 lane(s)") {
		t.Errorf("resume --dry-run --key: exit %d\n%s", code, out)
	}
	if code, out, errs := lanesAt("resume"); code != 0 || !strings.Contains(out, "resume: 4 of 4 lane(s)") {
		t.Fatalf("resume: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := lanesAt("resume"); code != 0 || !strings.Contains(out, "resume: 0 of 4 lane(s)") {
		t.Errorf("resume again: exit %d\n%s", code, out)
	}
	if code, _, _ := lanesAt("resume", "--dry-run"); code != 0 {
		t.Errorf("resume --dry-run with nothing to do: exit %d, want 0", code)
	}
	if n := pausedLanes(t, js, p.Stream.Name); n != 0 {
		t.Fatalf("%d lanes paused after the resume", n)
	}
}

// TestPauseTwoOperatorsAndKill: two operators pausing at once both
// succeed and every lane ends paused once; a pause killed with SIGKILL
// part-way is finished by a re-run, which leaves what was paused as it
// is.
func TestPauseTwoOperatorsAndKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a kill test")
	}
	cleanEnv(t)
	srv := natstest.Start(t)
	_, js := natstest.Connect(t, srv.URL())
	p := testutil.Plan(t, "orders", 32)
	natstest.CreateLanes(t, js, p)
	at := []string{"--server", srv.URL(), "--stream", p.Stream.Name, "--design", p.Design.Name}

	killAfter(t, srv.URL(), "CONSUMER.PAUSE", 3, append([]string{"pause"}, at...)...)
	n := pausedLanes(t, js, p.Stream.Name)
	if n == 0 || n == 32 {
		t.Fatalf("%d lanes paused after the kill, want some", n)
	}
	code, out, errs := lanes(t, append([]string{"pause"}, at...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("pause: %d of 32 lane(s)", 32-n)) {
		t.Fatalf("re-run after the kill: exit %d\n%s%s", code, out, errs)
	}
	if n := pausedLanes(t, js, p.Stream.Name); n != 32 {
		t.Fatalf("%d lanes paused after the re-run, want 32", n)
	}

	// Two operators, two processes.
	var wg sync.WaitGroup
	runs := make([]ran, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = runChild(t, srv.URL(), "", 0, append([]string{"resume"}, at...)...)
		}()
	}
	wg.Wait()
	if runs[0].code != 0 || runs[1].code != 0 {
		t.Fatalf("two operators resuming at once: %+v", runs)
	}
	testutil.WaitFor(t, "every lane resumed", 10*time.Second, func() bool { return pausedLanes(t, js, p.Stream.Name) == 0 })
}
