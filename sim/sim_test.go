package sim_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/sim"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/live"
	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/workload"
)

// seedStory is what lanes simulate runs with no arguments.
func seedStory(t *testing.T) sim.Options {
	t.Helper()
	p := testutil.PlanDesign(t, sim.SeedDesign(planner.Design{}))
	return sim.Options{Plan: p, Strategies: sim.SeedStrategies, SeedStory: true, Messages: 1000,
		Process: workload.Process{Kind: "fixed", Mean: 10 * time.Millisecond}, WorkersPerLane: 1, Seed: 1}
}

func TestRunSeedStory(t *testing.T) {
	r, err := sim.Run(context.Background(), seedStory(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "model" || r.Design != "orders" || r.Partitions != 8 || len(r.LaneNames) != 8 || r.Workload.KeysFrom != "alice, bob, carol" {
		t.Fatalf("report %+v", r)
	}
	want := []string{"single: the baseline, 100/s; per-key order held", "lanes: 2.9x the throughput of single; per-key order held"}
	if len(r.Verdicts) != 2 || r.Verdicts[0] != want[0] || !strings.HasPrefix(r.Verdicts[1], want[1]) {
		t.Fatalf("verdicts %q, want them to start %q", r.Verdicts, want)
	}
}

// A live run puts the model's prediction beside each live result and
// judges the live figures; stopped part way it returns what it measured
// with the error, and nothing when nothing ran.
func TestRunLiveBesideTheModel(t *testing.T) {
	o := seedStory(t)
	o.Live = true
	stopped := errors.New("stopped")
	o.RunLive = func(_ context.Context, req live.Options) ([]judge.Result, error) {
		return []judge.Result{{Strategy: "single", Throughput: 50, FinalStateCorrect: true}}, stopped
	}
	r, err := sim.Run(context.Background(), o)
	if err != stopped || r == nil || r.Mode != "live" || r.Server != "embedded" || len(r.Results) != 1 {
		t.Fatalf("report %+v, %v", r, err)
	}
	if m := r.Results[0].Model; m == nil || m.Strategy != "single" || m.Throughput < 99 {
		t.Fatalf("the model's prediction beside the live result: %+v", m)
	}
	if r.Verdicts[0] != "single: the baseline, 50.0/s; per-key order held" {
		t.Fatalf("verdict on the live figures: %q", r.Verdicts)
	}
	o.RunLive = func(context.Context, live.Options) ([]judge.Result, error) { return nil, stopped }
	if r, err := sim.Run(context.Background(), o); r != nil || err != stopped {
		t.Fatalf("nothing ran: %+v, %v", r, err)
	}
}

func TestSweepRecommends(t *testing.T) {
	o := seedStory(t)
	o.SeedStory, o.Keys, o.SweepFrom, o.SweepTo = false, "uniform:64", 1, 12
	o.Target = model.Target{Rate: 300}
	r, err := sim.Sweep(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sweep.Recommended < 4 || len(r.Sweep.Points) != 12 || !strings.HasPrefix(r.Sweep.Verdict, "Recommended: ") || r.Workload.Keys != 64 {
		t.Fatalf("sweep %+v", r)
	}
}

// Inputs the simulation cannot take are input errors (a keys file's own
// are the keys file reader's), before anything runs.
func TestInputErrors(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.txt")
	os.WriteFile(keys, []byte("alice\nnot.a.match.here\n"), 0o644)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# nothing\n"), 0o644)
	for _, tc := range []struct {
		keys string
		want string
		as   any
	}{
		{"file:" + keys, "--keys file:keys.txt line 2:", new(*keyfile.Error)},
		{"file:" + empty, "--keys file:empty.txt: no subjects in the file", new(*sim.InputError)},
		{"file:", "--keys file: names no file", new(*sim.InputError)},
		{"zipf:10", `--keys "zipf:10"`, new(*sim.InputError)},
	} {
		o := seedStory(t)
		o.SeedStory, o.Keys = false, tc.keys
		_, err := sim.Run(context.Background(), o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, tc.as) {
			t.Errorf("--keys %s: %v (%T), want %T starting %q", tc.keys, err, err, tc.as, tc.want)
		}
	}
	o := seedStory(t)
	o.Messages = 1_000_000_000
	var ie *sim.InputError
	if err := o.CheckSize(0); !errors.As(err, &ie) {
		t.Fatalf("a billion messages: %v", err)
	}
}
