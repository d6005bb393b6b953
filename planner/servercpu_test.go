package planner

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The measured table is usable, and its steep point is one of its rows:
// the first at SteepFactor times the cost with the fewest lanes.
func TestMeasuredServerCPU(t *testing.T) {
	c := MeasuredServerCPU
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	steep := c.Steep()
	for i, p := range c {
		grown := p.PerMessageUs >= SteepFactor*c[0].PerMessageUs
		if p.Lanes < steep && grown || p.Lanes == steep && !grown {
			t.Errorf("row %d (%+v): grown %v, yet the steep point is %d lanes", i, p, grown, steep)
		}
		if p.Cores > c.Cores() {
			t.Errorf("row %+v used more than the curve's %g cores", p, c.Cores())
		}
	}
	if steep == 0 || steep > MaxPartitions {
		t.Fatalf("steep point %d: the table never grows %dx within %d lanes", steep, SteepFactor, MaxPartitions)
	}
}

// Between points the curve is a straight line in log-log, through every
// point; flat below the first, the last slope beyond the last.
func TestServerCPUCurveShape(t *testing.T) {
	c := ServerCPUCurve{{Lanes: 10, PerMessageUs: 10, Cores: 1}, {Lanes: 1000, PerMessageUs: 100, Cores: 2}, {Lanes: 10000, PerMessageUs: 1000, Cores: 1.5}}
	for _, tc := range []struct {
		lanes int
		us    float64
	}{
		{1, 10}, {10, 10}, {100, math.Sqrt(10 * 100)}, {1000, 100}, {3162, 316.2}, {10000, 1000}, {20000, 2000},
	} {
		if got := c.PerMessage(tc.lanes); math.Abs(float64(got)/float64(time.Microsecond)-tc.us) > 0.01 {
			t.Errorf("%d lanes: %s, want %gµs", tc.lanes, got, tc.us)
		}
	}
	for lanes := 2; lanes <= 2*MaxPartitions; lanes++ {
		if c.PerMessage(lanes) < c.PerMessage(lanes-1) {
			t.Fatalf("%d lanes cost less than %d", lanes, lanes-1)
		}
	}
	if c.Cores() != 2 || c.Steep() != 1000 || (ServerCPUCurve{{Lanes: 1, PerMessageUs: 5, Cores: 1}}).Steep() != 0 {
		t.Errorf("cores %g, steep %d", c.Cores(), c.Steep())
	}
	if one := (ServerCPUCurve{{Lanes: 5, PerMessageUs: 7, Cores: 1}}); one.PerMessage(1) != 7*time.Microsecond || one.PerMessage(500) != 7*time.Microsecond {
		t.Error("a one-point curve is flat")
	}
	for _, bad := range []ServerCPUCurve{
		{{Lanes: 10, PerMessageUs: 10, Cores: 1}, {Lanes: 10, PerMessageUs: 20, Cores: 1}},
		{{Lanes: 10, PerMessageUs: 10, Cores: 1}, {Lanes: 20, PerMessageUs: 5, Cores: 1}},
		{{Lanes: 0, PerMessageUs: 10, Cores: 1}},
		{{Lanes: 10, PerMessageUs: 10, Cores: 0}},
	} {
		if bad.Check() == nil {
			t.Errorf("%+v passes the check", bad)
		}
	}
}

// plan warns at the steep point and above, not below; the warning names
// the measured figures and what to do.
func TestLaneCountWarning(t *testing.T) {
	steep := MeasuredServerCPU.Steep()
	warned := func(partitions int) string {
		d := seed()
		d.Partitions = partitions
		p, err := New(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.Warnings {
			if strings.Contains(w, "the server's CPU per message grows with the lane count") {
				return w
			}
		}
		return ""
	}
	if w := warned(steep - 1); w != "" {
		t.Errorf("%d lanes, below the steep point: %s", steep-1, w)
	}
	for _, n := range []int{steep, MaxPartitions} {
		w := warned(n)
		cost := MeasuredServerCPU.PerMessage(n)
		rate := twoFigures(MeasuredServerCPU.Cores() / cost.Seconds())
		for _, want := range []string{fmt.Sprintf("partitions is %d:", n), fmt.Sprintf("%s at %d", micros(MeasuredServerCPU.PerMessage(MeasuredServerCPU[0].Lanes)), MeasuredServerCPU[0].Lanes),
			fmt.Sprintf("about %s a message", micros(cost)), fmt.Sprintf("at most about %.0f msg/s", rate), "lane.keys_in_flight", "lanes simulate --sweep"} {
			if !strings.Contains(w, want) {
				t.Errorf("%d lanes: the warning lacks %q: %q", n, want, w)
			}
		}
	}
	// On the table as measured today: 1,024 lanes, about 2,500 msg/s.
	c := ServerCPUCurve{{Lanes: 16, PerMessageUs: 38, Cores: 0.76}, {Lanes: 1024, PerMessageUs: 550, Cores: 1.4}, {Lanes: 16384, PerMessageUs: 3200, Cores: 1.3}}
	d := Design{Partitions: 1024}
	if w := d.laneCountWarning(c); !strings.HasPrefix(w, "partitions is 1024: the server's CPU per message grows with the lane count (measured with file storage: 38µs at 16, 550µs at 1024, 3.2ms at 16384 lanes); with 1024 lanes, about 550µs a message, a server with 1.4 cores drains at most about 2500 msg/s whatever the handlers") {
		t.Errorf("%q", w)
	}
}
