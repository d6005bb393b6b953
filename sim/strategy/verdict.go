package strategy

import (
	"fmt"
	"strings"

	"github.com/lanes-dev/lanes/sim/figure"
	"github.com/lanes-dev/lanes/sim/judge"
)

// Verdicts are one plain sentence per result, in order: its throughput
// against the baseline strategy's (or the first result's when the
// baseline did not run), whether per-key order held, duplicates, messages
// never completed, the final state, and the strategy's own notes.
func Verdicts(results []judge.Result) []string {
	if len(results) == 0 {
		return nil
	}
	base := results[0]
	for _, r := range results {
		if st, ok := Lookup(r.Strategy); ok && st.Baseline {
			base = r
		}
	}
	var out []string
	for _, r := range results {
		var parts []string
		switch {
		case r.Strategy == base.Strategy:
			parts = append(parts, fmt.Sprintf("the baseline, %s", figure.Rate(r.Throughput)))
		case base.Throughput > 0:
			ratio := r.Throughput / base.Throughput
			if ratio > 0.95 && ratio < 1.05 {
				parts = append(parts, "the same throughput as "+base.Strategy)
			} else {
				parts = append(parts, fmt.Sprintf("%.1fx the throughput of %s", ratio, base.Strategy))
			}
		}
		parts = append(parts, correctness(r)...)
		if st, ok := Lookup(r.Strategy); ok && st.Notes != nil {
			parts = append(parts, st.Notes(r)...)
		}
		out = append(out, r.Strategy+": "+strings.Join(parts, "; "))
	}
	return out
}

// correctness is what the verdict says of order, duplicates, messages
// never completed and the final state.
func correctness(r judge.Result) []string {
	var parts []string
	if r.OrderViolations == 0 {
		parts = append(parts, "per-key order held")
	} else {
		parts = append(parts, fmt.Sprintf("per-key order broken %d %s", r.OrderViolations, figure.Plural(r.OrderViolations, "time", "times")))
	}
	if r.Duplicates > 0 {
		parts = append(parts, fmt.Sprintf("%d duplicate %s", r.Duplicates, figure.Plural(r.Duplicates, "execution", "executions")))
	}
	if r.Unfinished > 0 {
		parts = append(parts, fmt.Sprintf("%d %s never completed", r.Unfinished, figure.Plural(r.Unfinished, "message", "messages")))
	}
	switch {
	case !r.FinalStateCorrect:
		parts = append(parts, "final state wrong (an older update was applied last)")
	case r.StaleDropped > 0 && fenced(r.Strategy):
		parts = append(parts, fmt.Sprintf("final state right (%d stale %s refused by the lease's fencing token)", r.StaleDropped, figure.Plural(r.StaleDropped, "write", "writes")))
	case r.StaleDropped > 0:
		parts = append(parts, fmt.Sprintf("final state right (%d stale %s dropped by the version check)", r.StaleDropped, figure.Plural(r.StaleDropped, "update", "updates")))
	}
	return parts
}

// fenced: the strategy's store checks fencing tokens.
func fenced(name string) bool {
	st, ok := Lookup(name)
	return ok && st.Store == judge.Fenced
}
