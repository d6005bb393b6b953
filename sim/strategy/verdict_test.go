package strategy

import (
	"reflect"
	"testing"

	"github.com/lanes-dev/lanes/sim/judge"
)

// The verdicts are judged on hand-made results: the baseline, the
// comparison with it, and what each says of correctness.
func TestVerdicts(t *testing.T) {
	lanes := []judge.LaneResult{{Lane: 0, Messages: 5}, {Lane: 1}}
	for _, tc := range []struct {
		name    string
		results []judge.Result
		want    []string
	}{
		{"single is the baseline wherever it stands", []judge.Result{
			{Strategy: "lanes", Throughput: 280, FinalStateCorrect: true, Lanes: lanes},
			{Strategy: "single", Throughput: 100, FinalStateCorrect: true},
		}, []string{
			"lanes: 2.8x the throughput of single; per-key order held; only 1 of 2 lanes carry keys (a key never spreads over lanes)",
			"single: the baseline, 100/s; per-key order held",
		}},
		{"without single the first is the baseline; within 5% is the same", []judge.Result{
			{Strategy: "unordered", Throughput: 800, OrderViolations: 1, Duplicates: 2, Unfinished: 1},
			{Strategy: "versioned", Throughput: 790, OrderViolations: 3, StaleDropped: 1, FinalStateCorrect: true},
		}, []string{
			"unordered: the baseline, 800/s; per-key order broken 1 time; 2 duplicate executions; 1 message never completed; final state wrong (an older update was applied last)",
			"versioned: the same throughput as unordered; per-key order broken 3 times; final state right (1 stale update dropped by the version check)",
		}},
		{"a fenced store refuses, the leases say what they did", []judge.Result{
			{Strategy: "single", Throughput: 0, FinalStateCorrect: true},
			{Strategy: "kv-lease", Throughput: 330, StaleDropped: 7, FinalStateCorrect: true, LeaseRetries: 1, LeasesLost: 9},
		}, []string{
			"single: the baseline, 0.00/s; per-key order held",
			"kv-lease: per-key order held; final state right (7 stale writes refused by the lease's fencing token); 1 delivery found the key leased and retried later; 9 leases ran out mid-job (work longer than the lease TTL)",
		}},
		{"nothing ran", nil, nil},
	} {
		if got := Verdicts(tc.results); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
