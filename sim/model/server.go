package model

import "time"

// ServerCost is the sweep's server term: the nats-server's CPU per
// message grows with the number of lanes, because the server pays for
// every lane (file storage rewrites each active consumer's state file,
// and every lane has pulls waiting on it), and the server has only so
// much CPU. A design's messages per second can therefore not exceed
// Cores / CPUPerMessage(lanes), whatever its handlers could do. That is
// why fewer lanes with more keys in flight can beat many serial lanes.
//
// The rest of the model has no server time: the term bounds a sweep
// point's capacity (SweepPoint.ServerCeiling), it does not slow the
// simulated deliveries.
type ServerCost struct {
	// Cores is the CPU the server gets, in cores; 0 leaves the term out.
	Cores float64 `json:"cores"`
	// PerMessage is the CPU per message whatever the lanes, PerLane what
	// every lane adds to it.
	PerMessage time.Duration `json:"-"`
	PerLane    time.Duration `json:"-"`
	// The same in microseconds, for scripts (NewServerCost fills them in).
	PerMessageUs float64 `json:"cpu_per_message_us"`
	PerLaneUs    float64 `json:"cpu_per_lane_us"`
}

// DefaultServerCost is calibrated on nats-server 2.15 with file storage
// on a 2-core machine, from issue 17's measurements: 1,024 serial lanes
// drain about 2,500 msg/s for about 500µs of server CPU per message (so
// the server had about 1.25 cores: 2,500 x 500µs), 16 lanes about 38µs
// per message. A straight line through the two: 30.7µs + 0.458µs per
// lane. (At 1,024 lanes file storage's rewrites of consumer state alone
// take about 70% of a core.)
var DefaultServerCost = NewServerCost(1.25, 30700*time.Nanosecond, 458*time.Nanosecond)

// NewServerCost makes a server term.
func NewServerCost(cores float64, perMessage, perLane time.Duration) ServerCost {
	return ServerCost{Cores: cores, PerMessage: perMessage, PerLane: perLane,
		PerMessageUs: us(perMessage), PerLaneUs: us(perLane)}
}

// WithCores is the same term on another server.
func (c ServerCost) WithCores(cores float64) ServerCost {
	c.Cores = cores
	return c
}

// On reports whether the term is in use.
func (c ServerCost) On() bool { return c.Cores > 0 && c.PerMessage+c.PerLane > 0 }

// CPUPerMessage is the server's CPU per message with this many lanes.
func (c ServerCost) CPUPerMessage(lanes int) time.Duration {
	return c.PerMessage + time.Duration(lanes)*c.PerLane
}

// Ceiling is the most messages per second the server serves with this
// many lanes.
func (c ServerCost) Ceiling(lanes int) float64 {
	return c.Cores / c.CPUPerMessage(lanes).Seconds()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
