package sim

import (
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/model"
)

// Report is what lanes simulate reports: the setting, and one result per
// strategy on the same workload.
type Report struct {
	Mode string `json:"mode"` // model or live
	// Server is where a live run ran: its URL without user info, or
	// "embedded" for the in-process server the run started and removed.
	Server         string `json:"server,omitempty"`
	Design         string `json:"design"`
	Subject        string `json:"subject"`
	Partitions     int    `json:"partitions"`
	WorkersPerLane int    `json:"workers_per_lane"`
	// KeysInFlight is the design's lane.keys_in_flight when above 1: its
	// lanes are key-parallel.
	KeysInFlight int              `json:"keys_in_flight,omitempty"`
	Workload     WorkloadInfo     `json:"workload"`
	Results      []StrategyResult `json:"results"`
	// Verdicts are one sentence per result (strategy.Verdicts).
	Verdicts []string `json:"-"`
	// LaneNames are the lane consumers' names, by partition.
	LaneNames []string `json:"-"`
	// Lanes is the lanes strategy's lane table after a live run, read on
	// the server as lanes inspect reads it before the stream was removed
	// (nil when it could not be read).
	Lanes *health.Report `json:"-"`
	// Kept are the streams a live run left on a named server (Keep).
	Kept []string `json:"-"`
}

// WorkloadInfo describes the workload the strategies ran, for people and scripts.
type WorkloadInfo struct {
	Messages    int      `json:"messages"`
	Keys        int      `json:"keys"`
	KeysFrom    string   `json:"keys_from"` // uniform:K, zipf:K:S, file:PATH, stream NAME, or the named keys
	KeySample   []string `json:"-"`         // a few key names, for the heading
	Rate        float64  `json:"rate"`      // messages per second, 0 = all at once
	ProcessTime string   `json:"process_time"`
	AckWait     string   `json:"ack_wait"`
	MaxDeliver  int      `json:"max_deliver"`
	InProgress  bool     `json:"in_progress"`
	Crash       float64  `json:"crash"`
	// FailingKey's first message fails its first FailingAttempts attempts.
	FailingKey      string `json:"failing_key,omitempty"`
	FailingAttempts int    `json:"failing_attempts,omitempty"`
	Seed            uint64 `json:"seed"`
	// The kv-lease strategy's settings, when it runs.
	LeaseTTL   string `json:"lease_ttl,omitempty"`
	LeaseRetry string `json:"lease_retry,omitempty"`
	RoundTrip  string `json:"round_trip,omitempty"` // the model's
}

// StrategyResult is one strategy's figures. In a live run, Model holds the
// model's prediction for the same workload, beside each live figure.
type StrategyResult struct {
	judge.Result
	Model *judge.Result `json:"model,omitempty"`
}

// SweepReport is what a sweep reports.
type SweepReport struct {
	Design         string       `json:"design"`
	Subject        string       `json:"subject"`
	WorkersPerLane int          `json:"workers_per_lane"`
	Workload       WorkloadInfo `json:"workload"`
	Sweep          model.Sweep  `json:"sweep"`
}
