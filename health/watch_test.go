package health

import (
	"testing"
	"time"
)

func TestRatesAndCarry(t *testing.T) {
	t0 := time.Now()
	prev := &Report{Time: t0, Lanes: []Lane{{Name: "a", State: StateOK, At: t0, DeliveredConsumer: 10, AckFloorConsumer: 8}},
		Findings: []Finding{{Severity: Critical, Code: "misplaced"}, {Severity: Warning, Code: "stuck", Lane: "a"}}}
	cur := &Report{Time: t0.Add(2 * time.Second), Lanes: []Lane{
		{Name: "a", State: StateOK, At: t0.Add(2 * time.Second), DeliveredConsumer: 30, AckFloorConsumer: 28},
		{Name: "b", State: StateOK, At: t0.Add(2 * time.Second), DeliveredConsumer: 5},
	}}
	Rates(prev, cur)
	if cur.Interval != 2*time.Second || cur.Lanes[0].DeliveredRate != 10 || cur.Lanes[0].AckedRate != 10 || cur.Lanes[1].DeliveredRate != 0 {
		t.Fatalf("rates: %+v", cur)
	}
	// A recreated lane's counters go backwards: no negative rate.
	back := &Report{Time: t0.Add(4 * time.Second), Lanes: []Lane{{Name: "a", State: StateOK, At: t0.Add(4 * time.Second), DeliveredConsumer: 1}}}
	Rates(cur, back)
	if back.Lanes[0].DeliveredRate != 0 {
		t.Fatalf("rate after a reset: %v", back.Lanes[0].DeliveredRate)
	}
	CarryPlacement(prev, cur)
	if len(cur.Findings) != 1 || cur.Findings[0].Code != "misplaced" || cur.Summary.Critical != 1 {
		t.Fatalf("carried findings: %+v", cur.Findings)
	}
}
