package model

import (
	"time"

	"github.com/lanes-dev/lanes/planner"
)

// ServerCost is the sweep's server term: the nats-server's CPU per
// message grows with the number of lanes, because the server pays for
// every lane (file storage rewrites each active consumer's state file;
// with many lanes each consumer scans message blocks for its next
// match), and the server has only so much CPU. A design's messages per
// second can therefore not exceed Cores / CPUPerMessage(lanes), whatever
// its handlers could do. That is why fewer lanes with more keys in
// flight can beat many serial lanes, and why past some lane count more
// lanes only slow the server down.
//
// The rest of the model has no server time: the term bounds a sweep
// point's capacity (SweepPoint.ServerCeiling), it does not slow the
// simulated deliveries.
type ServerCost struct {
	// Cores is the CPU the server gets, in cores; 0 leaves the term out.
	Cores float64 `json:"cores"`
	// Curve is the server's measured CPU per message against the lane
	// count, interpolated between its points (planner.ServerCPUCurve).
	Curve planner.ServerCPUCurve `json:"measured"`
}

// DefaultServerCost is the measured curve (planner.MeasuredServerCPU, the
// same table plan's lane-count warning reads) on a server with the most
// cores it used in those drains: on that machine it then gives each
// server-bound drain's measured rate.
var DefaultServerCost = ServerCost{Cores: planner.MeasuredServerCPU.Cores(), Curve: planner.MeasuredServerCPU}

// WithCores is the same term on another server.
func (c ServerCost) WithCores(cores float64) ServerCost {
	c.Cores = cores
	return c
}

// On reports whether the term is in use.
func (c ServerCost) On() bool { return c.Cores > 0 && len(c.Curve) > 0 }

// CPUPerMessage is the server's CPU per message with this many lanes.
func (c ServerCost) CPUPerMessage(lanes int) time.Duration { return c.Curve.PerMessage(lanes) }

// Ceiling is the most messages per second the server serves with this
// many lanes; it falls as lanes are added.
func (c ServerCost) Ceiling(lanes int) float64 {
	return c.Cores / c.CPUPerMessage(lanes).Seconds()
}
