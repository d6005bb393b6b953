// Package judge is the order judge: it judges a run, simulated or live, by
// the same rules. Every execution of a message is reported as it begins
// and ends, and the Recorder counts per-key order violations, duplicate
// executions, latency, per-lane load, and whether the final per-key state
// is right.
package judge

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/sim/workload"
)

// Outcome is how an execution ended.
type Outcome int

const (
	// Done: the worker finished and applied its side effect (whether or not
	// its ack arrived in time: late acks are accepted, the effect happened).
	Done Outcome = iota
	// Crashed: the worker died before applying anything.
	Crashed
)

// Store is how the store the workers write their side effects to checks
// a write.
type Store int

const (
	// Plain applies every write: the last one wins.
	Plain Store = iota
	// Versioned drops a write older (by message version) than what the
	// store holds for its key, and counts it.
	Versioned
	// Fenced refuses a write whose fencing token (the kv-lease strategy's
	// lease revision) is below the highest the store has accepted for its
	// key, and counts it: a worker whose lease expired mid-job cannot
	// overwrite what the lease's next holder wrote.
	Fenced
)

// Exec identifies one execution (one delivery handled by one worker).
type Exec int

type execState struct {
	msg   int32
	lane  int32
	begin time.Duration
	open  bool
	token uint64 // the fencing token its write carries (Fenced stores)
}

// Recorder is safe for concurrent use (live workers report from goroutines).
type Recorder struct {
	mu       sync.Mutex
	w        *workload.Workload
	strategy string
	store    Store
	lanes    int
	workers  int
	laneOf   func(msg int) int

	execs      []execState
	doneAt     []time.Duration // per message, first Done; -1 while not done
	running    [][]int32       // per key: messages with an execution in progress
	maxBegun   []int32         // per key: highest message index begun, -1 none
	applied    []int32         // per key: message whose effect the store holds, -1 none
	busy       []time.Duration // per lane
	started    []bool          // per message: begun at least once
	violations int
	duplicates int
	redelivers int
	crashes    int
	stale      int
	fence      []uint64 // per key: the highest fencing token accepted (Fenced)
	retries    int      // lease retries: deliveries that found the key leased
	leasesLost int      // leases that had lapsed when their holder released them
	// interrupted: the run stopped before every message ran.
	interrupted bool
	// keysInFlight above 1: the lanes are key-parallel, each running up
	// to that many executions at once (utilization's denominator).
	keysInFlight int
}

// New makes a recorder for one strategy run. laneOf maps a message index to
// the lane (consumer) that delivers it; store says how writes are checked.
func New(w *workload.Workload, strategy string, lanes, workersPerLane int, laneOf func(msg int) int, store Store) *Recorder {
	keys := len(w.Spec.Keys.Names)
	r := &Recorder{
		w: w, strategy: strategy, store: store, lanes: lanes, workers: workersPerLane, laneOf: laneOf,
		doneAt:   make([]time.Duration, len(w.Messages)),
		started:  make([]bool, len(w.Messages)),
		execs:    make([]execState, 0, len(w.Messages)), // about one execution per message: no regrowth
		running:  make([][]int32, keys),
		maxBegun: make([]int32, keys),
		applied:  make([]int32, keys),
		busy:     make([]time.Duration, lanes),
	}
	for i := range r.doneAt {
		r.doneAt[i] = -1
	}
	for k := 0; k < keys; k++ {
		r.maxBegun[k], r.applied[k] = -1, -1
	}
	if store == Fenced {
		r.fence = make([]uint64, keys)
	}
	return r
}

// KeyParallel says that each lane is a key-parallel lane of k keys in
// flight: one owner runs up to k executions at once, so a lane's
// utilization is its busy time over k, not over its workers. The result
// names k.
func (r *Recorder) KeyParallel(k int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keysInFlight = k
}

// DoneAt is when message msg first completed, and whether it has.
func (r *Recorder) DoneAt(msg int) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.doneAt[msg], r.doneAt[msg] >= 0
}

// Begin records that a worker on lane starts message msg (0-based index) at
// time at. It counts an order violation when the message's predecessor has
// not finished, an earlier message of its key is still being executed, or a
// later message of its key has already begun.
func (r *Recorder) Begin(msg, lane int, at time.Duration) Exec {
	return r.BeginFenced(msg, lane, at, 0)
}

// BeginFenced is Begin for a worker whose write will carry a fencing
// token (a Fenced store checks it when the execution ends Done).
func (r *Recorder) BeginFenced(msg, lane int, at time.Duration, token uint64) Exec {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.w.Messages[msg].Key
	violation := false
	if p := r.w.Prev(msg); p >= 0 && r.doneAt[p] < 0 {
		violation = true
	}
	for _, m := range r.running[k] {
		if int(m) < msg {
			violation = true
		}
	}
	if int(r.maxBegun[k]) > msg {
		violation = true
	}
	if violation {
		r.violations++
	}
	if r.started[msg] {
		r.redelivers++
	}
	r.started[msg] = true
	r.maxBegun[k] = max(r.maxBegun[k], int32(msg))
	r.running[k] = append(r.running[k], int32(msg))
	r.execs = append(r.execs, execState{msg: int32(msg), lane: int32(lane), begin: at, open: true, token: token})
	return Exec(len(r.execs) - 1)
}

// End records how an execution ended.
func (r *Recorder) End(e Exec, at time.Duration, o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := &r.execs[e]
	if !x.open {
		return
	}
	x.open = false
	msg := int(x.msg)
	k := r.w.Messages[msg].Key
	if i := slices.Index(r.running[k], x.msg); i >= 0 {
		r.running[k] = slices.Delete(r.running[k], i, i+1)
	}
	r.busy[x.lane] += at - x.begin
	if o == Crashed {
		r.crashes++
		return
	}
	if r.doneAt[msg] >= 0 {
		r.duplicates++
	} else {
		r.doneAt[msg] = at
	}
	if r.store == Fenced {
		if x.token < r.fence[k] {
			r.stale++ // refused: a newer lease's holder has written
			return
		}
		r.fence[k] = x.token
	}
	if r.store == Versioned && r.applied[k] > int32(msg) {
		r.stale++ // a version check drops an older update
		return
	}
	if r.store == Versioned && r.applied[k] == int32(msg) {
		return // the same version again: idempotent
	}
	r.applied[k] = int32(msg)
}

// LeaseRetry counts a delivery that found its key leased by another worker
// and was handed back for later.
func (r *Recorder) LeaseRetry() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries++
}

// LeaseLost counts a lease that had lapsed (its TTL ran out mid-job) when
// its holder came to release it.
func (r *Recorder) LeaseLost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leasesLost++
}

// Result is the judged run. Durations in JSON are milliseconds or seconds,
// as the field names say.
type Result struct {
	Strategy       string `json:"strategy"`
	Partitions     int    `json:"partitions"`
	WorkersPerLane int    `json:"workers_per_lane"`
	// KeysInFlight is set on key-parallel lanes only: how many keys each
	// lane runs at once.
	KeysInFlight    int     `json:"keys_in_flight,omitempty"`
	Messages        int     `json:"messages"`
	Completed       int     `json:"completed"`
	Throughput      float64 `json:"throughput"`
	LatencyP50ms    float64 `json:"latency_p50_ms"`
	LatencyP99ms    float64 `json:"latency_p99_ms"`
	LatencyMaxms    float64 `json:"latency_max_ms"`
	DrainSeconds    float64 `json:"drain_seconds"`
	OrderViolations int     `json:"order_violations"`
	Duplicates      int     `json:"duplicates"`
	Executions      int     `json:"executions"`
	Redeliveries    int     `json:"redeliveries"` // executions beyond each message's first
	Unfinished      int     `json:"unfinished"`   // never completed: dropped by max deliver, or the run stopped
	Crashes         int     `json:"crashes"`
	StaleDropped    int     `json:"stale_updates_dropped"` // by the version check, or the fencing token
	// LeaseRetries and LeasesLost are the kv-lease strategy's: deliveries
	// that found their key leased (naked for later), and leases whose TTL
	// ran out before their holder released them.
	LeaseRetries      int  `json:"lease_retries,omitempty"`
	LeasesLost        int  `json:"leases_lost,omitempty"`
	FinalStateCorrect bool `json:"final_state_correct"`
	// Interrupted: the run was stopped before every message ran; the final
	// state is then judged against the messages that did.
	Interrupted      bool         `json:"interrupted,omitempty"`
	HottestLane      int          `json:"hottest_lane"`
	HottestLaneShare float64      `json:"hottest_lane_share"`
	HottestKey       string       `json:"hottest_key"`
	HottestKeyShare  float64      `json:"hottest_key_share"`
	Lanes            []LaneResult `json:"lanes"`
}

// LaneResult is one lane's load.
type LaneResult struct {
	Lane        int     `json:"lane"`
	Messages    int     `json:"messages"`
	Utilization float64 `json:"utilization"`
	PeakBacklog int     `json:"peak_backlog"`
}

// Result judges the run so far.
func (r *Recorder) Result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs := r.w.Messages
	res := Result{Strategy: r.strategy, Partitions: r.lanes, WorkersPerLane: r.workers, Messages: len(msgs),
		OrderViolations: r.violations, Duplicates: r.duplicates, Executions: len(r.execs), Redeliveries: r.redelivers,
		Crashes: r.crashes, StaleDropped: r.stale, LeaseRetries: r.retries, LeasesLost: r.leasesLost, KeysInFlight: r.keysInFlight}

	var lat []time.Duration
	var end time.Duration
	perLane := make([]int, r.lanes)
	perKey := make([]int, len(r.w.Spec.Keys.Names))
	for i, m := range msgs {
		perLane[r.laneOf(i)]++
		perKey[m.Key]++
		if d := r.doneAt[i]; d >= 0 {
			lat = append(lat, d-m.At)
			end = max(end, d)
		}
	}
	res.Completed = len(lat)
	res.Unfinished = len(msgs) - res.Completed
	if len(lat) > 0 {
		slices.Sort(lat)
		res.LatencyP50ms = ms(percentile(lat, 0.50))
		res.LatencyP99ms = ms(percentile(lat, 0.99))
		res.LatencyMaxms = ms(lat[len(lat)-1])
	}
	span := end - msgs[0].At
	res.DrainSeconds = span.Seconds()
	if span > 0 {
		res.Throughput = float64(res.Completed) / span.Seconds()
	}
	res.FinalStateCorrect, res.Interrupted = r.finalStateCorrect(), r.interrupted
	res.HottestLane, res.HottestLaneShare = hottest(perLane, len(msgs))
	var hk int
	hk, res.HottestKeyShare = hottest(perKey, len(msgs))
	res.HottestKey = r.w.Spec.Keys.Names[hk]
	peaks := r.peakBacklogs()
	slots := r.workers
	if r.keysInFlight > 1 {
		slots = r.keysInFlight
	}
	for l := 0; l < r.lanes; l++ {
		lr := LaneResult{Lane: l, Messages: perLane[l], PeakBacklog: peaks[l]}
		if span > 0 {
			lr.Utilization = min(1, float64(r.busy[l])/float64(span)/float64(max(1, slots)))
		}
		res.Lanes = append(res.Lanes, lr)
	}
	return res
}

// Interrupt marks the run as stopped before it finished.
func (r *Recorder) Interrupt() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.interrupted = true
}

// finalStateCorrect: every key's store holds its last message; after an
// interruption, the last of its messages that completed (a message that
// never ran is not an older update applied last).
func (r *Recorder) finalStateCorrect() bool {
	want := make([]int32, len(r.applied))
	for k := range want {
		want[k] = int32(r.w.LastOfKey(k))
	}
	if r.interrupted {
		for k := range want {
			want[k] = -1
		}
		for i, m := range r.w.Messages {
			if r.doneAt[i] >= 0 {
				want[m.Key] = int32(i)
			}
		}
	}
	for k := range r.applied {
		if r.applied[k] != want[k] {
			return false
		}
	}
	return true
}

// peakBacklogs is, per lane, the most messages arrived but not yet done.
func (r *Recorder) peakBacklogs() []int {
	arrivals := make([][]time.Duration, r.lanes)
	dones := make([][]time.Duration, r.lanes)
	for i, m := range r.w.Messages {
		l := r.laneOf(i)
		arrivals[l] = append(arrivals[l], m.At)
		if d := r.doneAt[i]; d >= 0 {
			dones[l] = append(dones[l], d)
		}
	}
	peaks := make([]int, r.lanes)
	for l := range peaks {
		slices.Sort(dones[l])
		j, backlog := 0, 0
		for _, a := range arrivals[l] {
			for j < len(dones[l]) && dones[l][j] <= a {
				j++
				backlog--
			}
			backlog++
			peaks[l] = max(peaks[l], backlog)
		}
	}
	return peaks
}

func hottest(counts []int, total int) (int, float64) {
	best := 0
	for i, c := range counts {
		if c > counts[best] {
			best = i
		}
	}
	if total == 0 || len(counts) == 0 {
		return 0, 0
	}
	return best, float64(counts[best]) / float64(total)
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(float64(len(sorted))*q+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SortByStrategy orders results as the strategies were asked for.
func SortByStrategy(results []Result, order []string) {
	pos := map[string]int{}
	for i, s := range order {
		pos[s] = i
	}
	sort.SliceStable(results, func(a, b int) bool { return pos[results[a].Strategy] < pos[results[b].Strategy] })
}
