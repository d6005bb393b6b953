package sim

import (
	"errors"
	"testing"

	"github.com/lanes-dev/lanes/internal/testutil"
)

func TestKeysFromCountsUnmapsAndSkips(t *testing.T) {
	p := testutil.PlanDesign(t, testutil.Seed(4))
	stored, _ := p.Layout.Transform("msgs.received_from.alice")
	k, err := keysFromCounts(p, "ORDERS", map[string]uint64{stored: 7, "msgs.received_from.bob": 2, "other.subject": 9})
	if err != nil || len(k.Names) != 2 {
		t.Fatalf("keys %+v, %v", k, err)
	}
	for i, name := range k.Names {
		want := map[string]float64{"alice": 7, "bob": 2}[name]
		if k.Weights[i] != want || k.Subjects[i] != "msgs.received_from."+name {
			t.Fatalf("key %s: subject %s weight %v, want the published subject and %v", name, k.Subjects[i], k.Weights[i], want)
		}
	}
	var ie *InputError
	if _, err := keysFromCounts(p, "ORDERS", map[string]uint64{"other.subject": 9}); !errors.As(err, &ie) {
		t.Fatalf("no matching subject: %v", err)
	}
}
