package work

import (
	"testing"

	"github.com/lanes-dev/lanes/membership"
)

// TestQuarantineDecision: what a message of a key gets in each state of
// its record: only a copy of the replay under way runs; others are parked
// (or held while the quarantine is lifted, and by an instance that cannot
// park).
func TestQuarantineDecision(t *testing.T) {
	rec := func(state, id string) *membership.Quarantine {
		return &membership.Quarantine{Key: "alice", Seq: 7, State: state, ReplayID: id}
	}
	for _, tc := range []struct {
		name    string
		e       *membership.Quarantine
		header  string
		canPark bool
		want    qAct
	}{
		{"not quarantined", nil, "", true, qRun},
		{"not quarantined, an old copy", nil, "r1", true, qRun},
		{"quarantined", rec(membership.QuarantineOn, ""), "", true, qPark},
		{"quarantined, a stale copy", rec(membership.QuarantineOn, ""), "r1", true, qPark},
		{"replaying, its copy", rec(membership.QuarantineReplaying, "r1"), "r1", true, qRun},
		{"replaying, another message", rec(membership.QuarantineReplaying, "r1"), "", true, qPark},
		{"replaying, an older replay's copy", rec(membership.QuarantineReplaying, "r2"), "r1", true, qPark},
		{"lifting, its copy", rec(membership.QuarantineLifting, "r1"), "r1", true, qRun},
		{"lifting, another message", rec(membership.QuarantineLifting, "r1"), "", true, qHold},
		{"no dead-letter subject", rec(membership.QuarantineOn, ""), "", false, qHold},
		{"no dead-letter subject, replaying", rec(membership.QuarantineReplaying, "r1"), "", false, qHold},
	} {
		if got := quarantineDecision(tc.e, tc.header, tc.canPark); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestQuarantineBookKeepsLatest: the watch's late report of an older
// revision does not undo what this instance wrote since.
func TestQuarantineBookKeepsLatest(t *testing.T) {
	var b quarantineBook
	on := &membership.QuarantineEntry{Quarantine: membership.Quarantine{Key: "a", Seq: 1, State: membership.QuarantineOn}, Rev: 5}
	b.set("k", on, 5)
	b.set("k", &membership.QuarantineEntry{Quarantine: membership.Quarantine{Key: "a", Seq: 1, State: membership.QuarantineReplaying}, Rev: 4}, 4)
	if got := b.get("k"); got != on {
		t.Fatalf("an older revision replaced the newer: %+v", got)
	}
	b.set("k", nil, 6)
	if got := b.get("k"); got != nil {
		t.Fatalf("a delete was not kept: %+v", got)
	}
	b.set("k", on, 5)
	if got := b.get("k"); got != nil {
		t.Fatalf("an older put undid the delete: %+v", got)
	}
}
