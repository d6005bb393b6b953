// Package workload describes and generates a simulation workload: which
// keys are published, when, how long each processing attempt takes and
// whether it crashes. Generation is deterministic for a seed, and every
// attempt of every message is decided by (seed, message, attempt), so the
// model and the live run see exactly the same work.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/planner"
)

// Keys is a weighted set of keys and the subjects they are published on.
type Keys struct {
	Names    []string  // the ordering key, tokens joined by '.'
	Subjects []string  // the published subject for each key
	Weights  []float64 // relative publish frequency

	index map[string]int // subject -> position, for Add
}

// Spec is a workload as the user describes it.
type Spec struct {
	Keys     Keys
	Messages int
	// Rate is messages per second; 0 publishes everything at once (a backlog).
	Rate    float64
	Process Process
	// Crash is the probability that a worker dies in the middle of an attempt.
	Crash float64
	// Failing, when its Key is set, makes one key's first message fail
	// its first Attempts attempts: a poison message that recovers.
	Failing Failing
	Seed    uint64
}

// Failing is a failing key: the first message of Key fails its first
// Attempts attempts (each runs its whole processing time, then fails, as
// a handler that returns an error), then succeeds. On an ordered lane the
// key's later messages wait behind it.
type Failing struct {
	Key      string
	Attempts int
}

// Message is one publish.
type Message struct {
	Seq int           // 1-based publish order
	Key int           // index into Keys
	At  time.Duration // arrival, from the start of the run
}

// Workload is a generated message sequence plus the per-attempt decisions.
type Workload struct {
	Spec     Spec
	Messages []Message
	// prev[i] is the index of the previous message with the same key, or -1.
	prev []int32
	// last[k] is the index of key k's last message, or -1.
	last []int32
	// failing is the index of the failing key's first message, or -1.
	failing int
}

// Generate draws the message sequence.
func Generate(s Spec) (*Workload, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(s.Seed, 0x6c616e6573))
	cdf := make([]float64, len(s.Keys.Weights))
	total := 0.0
	for i, w := range s.Keys.Weights {
		total += w
		cdf[i] = total
	}
	if total <= 0 {
		return nil, fmt.Errorf("every key has weight 0: nothing would be published")
	}
	return build(s, func(int) int {
		k := sort.SearchFloat64s(cdf, r.Float64()*total)
		return min(k, len(cdf)-1)
	})
}

// Sequence publishes exactly the given keys (indexes into s.Keys) in order,
// instead of drawing them: for closed-form checks and for replaying a known
// order. s.Messages is ignored; attempts are still decided by s.Seed.
func Sequence(s Spec, keys []int) (*Workload, error) {
	s.Messages = len(keys)
	if err := s.validate(); err != nil {
		return nil, err
	}
	for i, k := range keys {
		if k < 0 || k >= len(s.Keys.Names) {
			return nil, fmt.Errorf("message %d: key index %d out of range", i+1, k)
		}
	}
	return build(s, func(i int) int { return keys[i] })
}

// build lays out s.Messages messages, the key of each chosen by keyOf, and
// arrivals evenly spaced at the rate (all at 0 when the rate is 0).
func build(s Spec, keyOf func(i int) int) (*Workload, error) {
	w := &Workload{Spec: s, Messages: make([]Message, s.Messages), prev: make([]int32, s.Messages), last: make([]int32, len(s.Keys.Names)), failing: -1}
	for k := range w.last {
		w.last[k] = -1
	}
	var gap float64
	if s.Rate > 0 {
		gap = float64(time.Second) / s.Rate
	}
	for i := range w.Messages {
		k := keyOf(i)
		// float arithmetic, not i*gap rounded once: rates like 3/s stay exact on average
		w.Messages[i] = Message{Seq: i + 1, Key: k, At: time.Duration(float64(i) * gap)}
		w.prev[i] = w.last[k]
		w.last[k] = int32(i)
	}
	if f := s.Failing; f.Key != "" {
		k := slices.Index(s.Keys.Names, f.Key)
		for i := range w.Messages {
			if w.Messages[i].Key == k {
				w.failing = i
				break
			}
		}
		if w.failing < 0 {
			return nil, fmt.Errorf("--failing-key %q: no message of the workload has that key", f.Key)
		}
	}
	return w, nil
}

func (s Spec) validate() error {
	switch {
	case len(s.Keys.Names) == 0:
		return fmt.Errorf("the workload has no keys")
	case len(s.Keys.Names) != len(s.Keys.Subjects) || len(s.Keys.Names) != len(s.Keys.Weights):
		return fmt.Errorf("keys, subjects and weights differ in length")
	case s.Messages < 1:
		return fmt.Errorf("--messages must be at least 1")
	case s.Rate < 0:
		return fmt.Errorf("--rate must be 0 (all at once) or positive")
	case s.Crash < 0 || s.Crash >= 1:
		return fmt.Errorf("--crash must be a probability in [0, 1)")
	case s.Failing.Key != "" && s.Failing.Attempts < 1:
		return fmt.Errorf("--failing-key %q: its first message must fail at least 1 attempt", s.Failing.Key)
	case s.Failing.Key != "" && !slices.Contains(s.Keys.Names, s.Failing.Key):
		return fmt.Errorf("--failing-key %q: no such key in the workload", s.Failing.Key)
	}
	for i, w := range s.Keys.Weights {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("key %q has weight %v", s.Keys.Names[i], w)
		}
	}
	return nil
}

// Prev is the index of the previous message with the same key, or -1.
func (w *Workload) Prev(i int) int { return int(w.prev[i]) }

// IsLastOfKey reports whether message i is its key's last message.
func (w *Workload) IsLastOfKey(i int) bool { return int(w.last[w.Messages[i].Key]) == i }

// LastOfKey is the index of key k's last message, or -1 if it has none.
func (w *Workload) LastOfKey(k int) int { return int(w.last[k]) }

// Subject is the published subject of message i.
func (w *Workload) Subject(i int) string { return w.Spec.Keys.Subjects[w.Messages[i].Key] }

// attemptRand is the random source for attempt a of message i: the same in
// the model and the live run, whatever order attempts happen in.
func (w *Workload) attemptRand(i, attempt int) *rand.Rand {
	return rand.New(rand.NewPCG(w.Spec.Seed^uint64(i)*0x9e3779b97f4a7c15, uint64(attempt)+1))
}

// Attempt decides attempt a (1-based) of message i: how long the worker
// works on it, and whether it dies before finishing (then the work time is
// how long it ran before dying). The failing key's first message fails
// its first Failing.Attempts attempts after its whole work time.
func (w *Workload) Attempt(i, attempt int) (work time.Duration, crash bool) {
	r := w.attemptRand(i, attempt)
	work = w.Spec.Process.draw(r)
	if i == w.failing && attempt <= w.Spec.Failing.Attempts {
		return work, true
	}
	if w.Spec.Crash > 0 && r.Float64() < w.Spec.Crash {
		return time.Duration(r.Float64() * float64(work)), true
	}
	return work, false
}

// Process is a processing-time distribution.
type Process struct {
	Kind string        // fixed, exp, lognormal
	Mean time.Duration // fixed value, or exponential mean
	P50  time.Duration // lognormal
	P99  time.Duration // lognormal
}

// z99 is the standard normal quantile at 0.99.
const z99 = 2.3263478740408408

func (p Process) draw(r *rand.Rand) time.Duration {
	switch p.Kind {
	case "exp":
		return time.Duration(r.ExpFloat64() * float64(p.Mean))
	case "lognormal":
		mu := math.Log(float64(p.P50))
		sigma := (math.Log(float64(p.P99)) - mu) / z99
		return time.Duration(math.Exp(mu + sigma*r.NormFloat64()))
	default:
		return p.Mean
	}
}

// Median is the distribution's median, for capacity estimates.
func (p Process) Median() time.Duration {
	switch p.Kind {
	case "exp":
		return time.Duration(float64(p.Mean) * math.Ln2)
	case "lognormal":
		return p.P50
	}
	return p.Mean
}

// Average is the distribution's mean.
func (p Process) Average() time.Duration {
	if p.Kind == "lognormal" {
		mu := math.Log(float64(p.P50))
		sigma := (math.Log(float64(p.P99)) - mu) / z99
		return time.Duration(math.Exp(mu + sigma*sigma/2))
	}
	return p.Mean
}

func (p Process) String() string {
	switch p.Kind {
	case "exp":
		return "exp:" + p.Mean.String()
	case "lognormal":
		return "lognormal:" + p.P50.String() + ":" + p.P99.String()
	}
	return p.Mean.String()
}

// ParseProcess reads "10ms", "exp:10ms" or "lognormal:P50:P99".
func ParseProcess(s string) (Process, error) {
	parts := strings.Split(s, ":")
	dur := func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("--process-time %q: %q is not a positive duration", s, v)
		}
		return d, nil
	}
	switch {
	case len(parts) == 1:
		d, err := dur(parts[0])
		return Process{Kind: "fixed", Mean: d}, err
	case parts[0] == "exp" && len(parts) == 2:
		d, err := dur(parts[1])
		return Process{Kind: "exp", Mean: d}, err
	case parts[0] == "lognormal" && len(parts) == 3:
		p50, err := dur(parts[1])
		if err != nil {
			return Process{}, err
		}
		p99, err := dur(parts[2])
		if err != nil {
			return Process{}, err
		}
		if p99 < p50 {
			return Process{}, fmt.Errorf("--process-time %q: p99 must not be below p50", s)
		}
		return Process{Kind: "lognormal", P50: p50, P99: p99}, nil
	}
	return Process{}, fmt.Errorf("--process-time %q: write 10ms, exp:10ms or lognormal:P50:P99", s)
}

// Subjecter builds the published subject for a key; the planner supplies it.
type Subjecter func(key string) (string, error)

// KeyCount is the K of "uniform:K" or "zipf:K:S", or 0: for sizing a
// simulation before its keys are made.
func KeyCount(spec string) int {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || (parts[0] != "uniform" && parts[0] != "zipf") {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return max(n, 0)
}

// ParseKeys reads "uniform:K" or "zipf:K:S"; file-based keys come from
// KeysFromLines. Generated keys are named key-0001 ... key-K.
func ParseKeys(s string, subject Subjecter) (Keys, error) {
	parts := strings.Split(s, ":")
	count := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > planner.MaxSimKeys {
			return 0, fmt.Errorf("--keys %q: key count %q must be a whole number between 1 and %d", s, v, planner.MaxSimKeys)
		}
		return n, nil
	}
	switch {
	case parts[0] == "uniform" && len(parts) == 2:
		n, err := count(parts[1])
		if err != nil {
			return Keys{}, err
		}
		return generatedKeys(n, func(int) float64 { return 1 }, subject)
	case parts[0] == "zipf" && len(parts) == 3:
		n, err := count(parts[1])
		if err != nil {
			return Keys{}, err
		}
		exp, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || exp <= 0 || exp > 10 {
			return Keys{}, fmt.Errorf("--keys %q: the Zipf exponent %q must be a number in (0, 10]", s, parts[2])
		}
		return generatedKeys(n, func(rank int) float64 { return 1 / math.Pow(float64(rank), exp) }, subject)
	}
	return Keys{}, fmt.Errorf("--keys %q: write uniform:K, zipf:K:S or file:PATH", s)
}

func generatedKeys(n int, weight func(rank int) float64, subject Subjecter) (Keys, error) {
	width := len(strconv.Itoa(n))
	k := Keys{Names: make([]string, n), Subjects: make([]string, n), Weights: make([]float64, n)}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("key-%0*d", width, i+1)
		subj, err := subject(name)
		if err != nil {
			return Keys{}, err
		}
		k.Names[i], k.Subjects[i], k.Weights[i] = name, subj, weight(i+1)
	}
	return k, nil
}

// NamedKeys gives each named key the same weight (the seed story's alice, bob, carol).
func NamedKeys(names []string, subject Subjecter) (Keys, error) {
	k := Keys{}
	for _, n := range names {
		subj, err := subject(n)
		if err != nil {
			return Keys{}, err
		}
		k.Names, k.Subjects, k.Weights = append(k.Names, n), append(k.Subjects, subj), append(k.Weights, 1)
	}
	return k, nil
}

// Add appends a key with a weight (file lines, or per-subject counts of a
// live stream). Repeated subjects add up.
func (k *Keys) Add(name, subject string, weight float64) {
	if k.index == nil {
		k.index = make(map[string]int, len(k.Subjects))
		for i, s := range k.Subjects {
			k.index[s] = i
		}
	}
	if i, ok := k.index[subject]; ok {
		k.Weights[i] += weight
		return
	}
	k.index[subject] = len(k.Subjects)
	k.Names, k.Subjects, k.Weights = append(k.Names, name), append(k.Subjects, subject), append(k.Weights, weight)
}
