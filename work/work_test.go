package work

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/testutil"
)

// TestProcessesEveryMessageInOrder: one instance serves every lane,
// processes every message once and each key in order, and a stop returns
// nil with nothing left out.
func TestProcessesEveryMessageInOrder(t *testing.T) {
	t.Parallel()
	s, _, js, p := setup(t, "orders", 8)
	publishKeys(t, js, p, 20, 25)
	rec := &recorder{}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, rec.handler("a", nil))
	testutil.WaitFor(t, "500 messages processed", 30*time.Second, func() bool { return len(rec.seqs()) == 500 })
	if err := w.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for seq, n := range rec.seqs() {
		if n != 1 {
			t.Errorf("seq %d processed %d times", seq, n)
		}
	}
	checkOrder(t, rec.snapshot(), false)
	st := w.w.Stats()
	if st.Processed != 500 || st.Failed != 0 || st.InFlight != 0 {
		t.Errorf("stats: %+v", st)
	}
	_ = context.Background
}
