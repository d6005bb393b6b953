package planner

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// ServerCPUPoint is one measured drain: with Lanes serial lanes the
// nats-server spent PerMessageUs of CPU per message, and used Cores
// while it drained (its CPU time over the drain's time).
type ServerCPUPoint struct {
	Lanes        int     `json:"lanes"`
	PerMessageUs float64 `json:"cpu_per_message_us"`
	Cores        float64 `json:"cores"`
}

// MeasuredServerCPU is the server's CPU per message against the lane
// count: the one table behind plan's lane-count warning and simulate's
// server term. Lanes ascending, CPU per message rising with them.
//
// Source: internal/scalebench BenchmarkScaleDrain (go test -tags scale
// -run '^$' -bench ScaleDrain -benchtime 1x ./internal/scalebench): a
// backlog drained by the work package's serial lanes (no-op handler) from
// a nats-server 2.15.2 of its own process, file storage, on the 2-core
// development machine; the server's CPU from /proc. 100,000 messages at
// 16 and 1,024 lanes, 20,000 at 4,096, 2 per lane at 16,384: 24,361,
// 1,573, 821 and 269 msg/s. At 1,024 lanes most of the server's CPU
// rewrites every active lane's state file, at 16,384 each consumer scans
// message blocks for its next match. Cores is drain rate x CPU per
// message.
var MeasuredServerCPU = ServerCPUCurve{
	{Lanes: 16, PerMessageUs: 38, Cores: 0.92},
	{Lanes: 1024, PerMessageUs: 790, Cores: 1.24},
	{Lanes: 4096, PerMessageUs: 1757, Cores: 1.44},
	{Lanes: 16384, PerMessageUs: 4225, Cores: 1.14},
}

// ServerCPUCurve is measured CPU per message, lanes ascending. Between
// two points the cost follows a straight line in log-log (cost ~
// lanes^slope: it grows more slowly than the lane count), beyond the last
// one the last segment's slope; below the first it stays at the first
// point's cost (nothing measured says fewer lanes make a message cheaper).
type ServerCPUCurve []ServerCPUPoint

// PerMessage is the server's CPU per message with this many lanes.
func (c ServerCPUCurve) PerMessage(lanes int) time.Duration {
	return time.Duration(c.perMessageUs(lanes) * float64(time.Microsecond))
}

func (c ServerCPUCurve) perMessageUs(lanes int) float64 {
	if len(c) == 0 {
		return 0
	}
	if len(c) == 1 || lanes <= c[0].Lanes {
		return c[0].PerMessageUs
	}
	i := 1
	for i < len(c)-1 && lanes > c[i].Lanes {
		i++
	}
	a, b := c[i-1], c[i]
	slope := math.Log(b.PerMessageUs/a.PerMessageUs) / math.Log(float64(b.Lanes)/float64(a.Lanes))
	return a.PerMessageUs * math.Pow(float64(lanes)/float64(a.Lanes), slope)
}

// Cores is the most CPU the server used in a measured drain: what it got
// on the measuring machine once it was the bound (with few lanes the
// client bound the drain and the server used less).
func (c ServerCPUCurve) Cores() float64 {
	most := 0.0
	for _, p := range c {
		most = max(most, p.Cores)
	}
	return most
}

// Check says why the curve cannot be used, or returns nil: lanes must
// ascend and the CPU per message be positive and not fall.
func (c ServerCPUCurve) Check() error {
	for i, p := range c {
		switch {
		case p.Lanes < 1 || p.PerMessageUs <= 0 || p.Cores <= 0:
			return fmt.Errorf("server CPU point %+v: lanes, CPU per message and cores must be positive", p)
		case i > 0 && p.Lanes <= c[i-1].Lanes:
			return fmt.Errorf("server CPU points: lanes %d after %d, want them ascending", p.Lanes, c[i-1].Lanes)
		case i > 0 && p.PerMessageUs < c[i-1].PerMessageUs:
			return fmt.Errorf("server CPU points: %gµs at %d lanes is below %gµs at %d", p.PerMessageUs, p.Lanes, c[i-1].PerMessageUs, c[i-1].Lanes)
		}
	}
	return nil
}

// SteepFactor is how much dearer than with the fewest lanes measured a
// message must be for plan to warn. From 10x the server, not the
// handlers, decides the drain rate of all but very slow handlers: on
// issue 18's figures 1,024 serial lanes on 1.4 cores drain at most about
// 2,500 msg/s, which their handlers alone would beat unless each message
// took them 0.4 s or more.
const SteepFactor = 10

// Steep is the fewest lanes at which the server's CPU per message was
// measured at SteepFactor or more times its cost with the table's fewest
// lanes (0: no such point). It is a measured point, not an interpolation:
// on issue 18's figures 1,024 lanes, at 550µs against 38µs at 16 (14x).
func (c ServerCPUCurve) Steep() int {
	for _, p := range c {
		if p.PerMessageUs >= SteepFactor*c[0].PerMessageUs {
			return p.Lanes
		}
	}
	return 0
}

// laneCountWarning warns a design whose lane count is at or above the
// curve's Steep point: there the server's CPU per message, not the
// handlers, holds the drain rate down.
func (d *Design) laneCountWarning(c ServerCPUCurve) string {
	steep := c.Steep()
	if steep == 0 || d.Partitions < steep {
		return ""
	}
	measured := make([]string, len(c))
	for i, p := range c {
		measured[i] = fmt.Sprintf("%s at %d", micros(c.PerMessage(p.Lanes)), p.Lanes)
	}
	cost := c.PerMessage(d.Partitions)
	return fmt.Sprintf("partitions is %d: the server's CPU per message grows with the lane count (measured with file storage: %s lanes); "+
		"with %d lanes, about %s a message, a server with %.1f cores drains at most about %.0f msg/s whatever the handlers; "+
		"for key-parallel work, fewer lanes with lane.keys_in_flight cost the server less: size both with lanes simulate --sweep and --sweep-keys-in-flight",
		d.Partitions, strings.Join(measured, ", "), d.Partitions, micros(cost), c.Cores(), twoFigures(c.Cores()/cost.Seconds()))
}

func micros(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// twoFigures rounds to two significant figures: the curve is no finer.
func twoFigures(x float64) float64 {
	if x <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(x))-1)
	return math.Round(x/p) * p
}
