package planner

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
)

// Assignment is one input line placed in its lane.
type Assignment struct {
	Line      int    `json:"-"`
	Subject   string `json:"subject"`
	Key       string `json:"key"`
	Partition int    `json:"partition"`
	Lane      string `json:"lane"`
	Count     int64  `json:"count,omitempty"`
}

// LineError names the input line that cannot be placed.
type LineError struct {
	Line   int
	Text   string
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: %q %s", e.Line, e.Text, e.Reason)
}

// Assigner places subjects in lanes without allocating per line. A line is
// "SUBJECT [COUNT]"; a bare key stands for the subject when the pattern has
// exactly one '*'.
type Assigner struct {
	plan    *Plan
	scratch []byte
}

// NewAssigner returns an Assigner for p. It is not safe for concurrent use.
func NewAssigner(p *Plan) *Assigner { return &Assigner{plan: p} }

// Parsed is a line placed in its partition. Subject and key bytes point
// into the Assigner's scratch space and are valid until the next call.
type Parsed struct {
	Subject   []byte
	Key       []byte // key tokens joined by '.'
	Partition int
	Count     int64
}

// Place parses one input line. Blank lines and '#' comments return ok=false
// and no error.
func (a *Assigner) Place(lineNo int, line []byte) (Parsed, bool, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return Parsed{}, false, nil
	}
	subject, count := line, int64(1)
	if i := indexSpace(line); i >= 0 {
		subject = line[:i]
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line[i+1:])), 10, 64)
		if err != nil || n < 0 {
			return Parsed{}, false, &LineError{lineNo, string(line), "has text after the subject that is not a message count"}
		}
		count = n
	}
	l := a.plan.Layout
	if len(l.wildPos) == 1 && bytes.IndexByte(subject, '.') < 0 && len(l.srcTokens) > 1 {
		subject = a.expandBareKey(subject)
	}
	var wild [maxWildcards]span
	if !l.matchSource(subject, &wild) {
		return Parsed{}, false, &LineError{lineNo, string(line), "does not match the subject pattern " + l.Source}
	}
	p := Parsed{Subject: subject, Partition: l.hashKey(subject, &wild), Count: count}
	p.Key = a.appendKey(subject, &wild)
	return p, true, nil
}

// indexSpace finds the first space or tab (bytes.IndexAny builds a set per call).
func indexSpace(b []byte) int {
	for i, c := range b {
		if c == ' ' || c == '\t' {
			return i
		}
	}
	return -1
}

func (a *Assigner) expandBareKey(key []byte) []byte {
	a.scratch = a.scratch[:0]
	for i, t := range a.plan.Layout.srcTokens {
		if i > 0 {
			a.scratch = append(a.scratch, '.')
		}
		if t == "*" {
			a.scratch = append(a.scratch, key...)
		} else {
			a.scratch = append(a.scratch, t...)
		}
	}
	return a.scratch
}

func (a *Assigner) appendKey(subject []byte, wild *[maxWildcards]span) []byte {
	kt := a.plan.Layout.KeyTokens
	if len(kt) == 1 {
		s := wild[kt[0]-1]
		return subject[s.start:s.end]
	}
	start := len(a.scratch)
	for i, k := range kt {
		if i > 0 {
			a.scratch = append(a.scratch, '.')
		}
		s := wild[k-1]
		a.scratch = append(a.scratch, subject[s.start:s.end]...)
	}
	return a.scratch[start:]
}

// Assign places one subject (or bare key) and returns the full assignment.
func (a *Assigner) Assign(subject string) (Assignment, error) {
	p, ok, err := a.Place(1, []byte(subject))
	if err != nil {
		return Assignment{}, err
	}
	if !ok {
		return Assignment{}, &LineError{1, subject, "is empty"}
	}
	return Assignment{Line: 1, Subject: string(p.Subject), Key: string(p.Key), Partition: p.Partition,
		Lane: a.plan.Lanes[p.Partition].Name}, nil
}

// Tally counts keys per lane and keeps the hottest keys in bounded memory,
// whatever the number of distinct keys (a heavy-hitters summary).
type Tally struct {
	perLane []int64
	hot     *hotKeys
	lines   int64
}

// HotKeyCapacity bounds the keys tracked for the hottest-keys report.
const HotKeyCapacity = 64

func NewTally(partitions int) *Tally {
	return &Tally{perLane: make([]int64, partitions), hot: newHotKeys(HotKeyCapacity)}
}

// Add counts a placed line.
func (t *Tally) Add(p Parsed) {
	t.perLane[p.Partition] += p.Count
	t.lines++
	t.hot.add(p.Key, p.Partition, p.Count)
}

// Skew summarises how evenly keys spread over lanes.
type Skew struct {
	Lines     int64      `json:"lines"`
	Total     int64      `json:"total"`
	Min       int64      `json:"min"`
	Max       int64      `json:"max"`
	Mean      float64    `json:"mean"`
	MaxToMean float64    `json:"max_to_mean"`
	Empty     int        `json:"empty_lanes"`
	PerLane   []int64    `json:"per_lane"`
	HotLanes  []LaneLoad `json:"hottest_lanes"`
	HotKeys   []KeyLoad  `json:"hottest_keys"`
	// HotKeysApprox is true once there are too many keys for exact counts
	// (the sketch's cells are shared): hottest-key counts may then be
	// overestimated by MaxError (with probability 1 - e^-4), never under.
	HotKeysApprox bool  `json:"hottest_keys_approximate"`
	MaxError      int64 `json:"hottest_keys_max_error"`
}

type LaneLoad struct {
	Lane      string `json:"lane"`
	Partition int    `json:"partition"`
	Keys      int64  `json:"keys"`
}

type KeyLoad struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Lane  string `json:"lane"`
}

// Skew computes the summary; top is how many hottest lanes and keys to list.
func (t *Tally) Skew(p *Plan, top int) Skew {
	s := Skew{Lines: t.lines, PerLane: append([]int64(nil), t.perLane...), Min: -1}
	for _, c := range t.perLane {
		s.Total += c
		s.Min = minOrFirst(s.Min, c)
		s.Max = max(s.Max, c)
		if c == 0 {
			s.Empty++
		}
	}
	if n := len(t.perLane); n > 0 {
		s.Mean = float64(s.Total) / float64(n)
	}
	if s.Mean > 0 {
		s.MaxToMean = float64(s.Max) / s.Mean
	}
	order := make([]int, len(t.perLane))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return t.perLane[order[a]] > t.perLane[order[b]] })
	for _, i := range order[:min(top, len(order))] {
		s.HotLanes = append(s.HotLanes, LaneLoad{Lane: p.Lanes[i].Name, Partition: i, Keys: t.perLane[i]})
	}
	for _, e := range t.hot.top(top) {
		s.HotKeys = append(s.HotKeys, KeyLoad{Key: e.key, Count: e.count, Lane: p.Lanes[e.partition].Name})
	}
	s.HotKeysApprox, s.MaxError = t.hot.approximate()
	return s
}

func minOrFirst(cur, v int64) int64 {
	if cur < 0 || v < cur {
		return v
	}
	return cur
}
