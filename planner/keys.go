package planner

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"
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
	Text   string // the start of the line (a line may be 1 MiB long)
	Len    int    // the line's length
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: %s %s", e.Line, quoteCut(e.Text, e.Len, quotedLine), e.Reason)
}

// quotedLine is how much of a bad line an error shows.
const quotedLine = 80

// lineError keeps only the start of a bad line: enough to quote it.
func lineError(n int, line []byte, reason string) *LineError {
	return &LineError{Line: n, Text: string(line[:min(len(line), quotedLine+utf8.UTFMax)]), Len: len(line), Reason: reason}
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
		if err == nil && n > MaxKeyCount {
			return Parsed{}, false, lineError(lineNo, line, fmt.Sprintf("has a message count above %d", int64(MaxKeyCount)))
		}
		if err != nil || n < 0 {
			return Parsed{}, false, lineError(lineNo, line, "has text after the subject that is not a message count")
		}
		count = n
	}
	l := a.plan.Layout
	if l.IsBareKey(subject) {
		a.scratch = l.AppendBareKey(a.scratch[:0], subject)
		subject = a.scratch
	}
	var wild [maxWildcards]span
	if !l.matchSource(subject, &wild) {
		return Parsed{}, false, lineError(lineNo, line, "does not match the subject pattern "+l.Source)
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
		return Assignment{}, &LineError{Line: 1, Text: subject, Len: len(subject), Reason: "is empty"}
	}
	return Assignment{Line: 1, Subject: string(p.Subject), Key: string(p.Key), Partition: p.Partition,
		Lane: a.plan.Lanes[p.Partition].Name}, nil
}

// Tally counts, per lane, the distinct keys and the messages of the keys
// input, and finds the hottest keys, in bounded memory whatever the number
// of distinct keys.
type Tally struct {
	messages []int64 // per lane
	lines    int64
	keys     *keyStats
}

// HotKeyCapacity bounds the keys tracked for the hottest-keys report.
const HotKeyCapacity = 64

func NewTally(partitions int) *Tally {
	return &Tally{messages: make([]int64, partitions), keys: newKeyStats(partitions, HotKeyCapacity)}
}

// Add counts a placed line: one key with Count messages.
func (t *Tally) Add(p Parsed) {
	t.messages[p.Partition] = satAdd(t.messages[p.Partition], p.Count)
	t.lines++
	t.keys.add(p.Key, p.Partition, p.Count)
}

// Skew summarises how evenly keys and their messages spread over lanes.
type Skew struct {
	Lines    int64 `json:"lines"`
	Keys     int64 `json:"keys"`     // distinct keys
	Messages int64 `json:"messages"` // the lines' counts added up (1 per line without a count)
	// KeysApprox is true once there are too many distinct keys to count
	// exactly: distinct keys per lane are then HyperLogLog estimates.
	KeysApprox      bool   `json:"keys_approximate"`
	KeysPerLane     Spread `json:"keys_per_lane"`
	MessagesPerLane Spread `json:"messages_per_lane"`
	// MaxToMean is the busiest lane's messages over the mean: the load skew.
	MaxToMean float64    `json:"max_to_mean"`
	Empty     int        `json:"empty_lanes"` // lanes no key maps to
	HotLanes  []LaneLoad `json:"hottest_lanes"`
	HotKeys   []KeyLoad  `json:"hottest_keys"`
	// HotKeysApprox is true once there are too many keys for exact counts:
	// hottest-key counts may then be overestimated by at most MaxError
	// (with probability 1 - e^-4), never under.
	HotKeysApprox bool  `json:"hottest_keys_approximate"`
	MaxError      int64 `json:"hottest_keys_max_error"`

	// Per lane, by partition (the plan's lanes carry them in JSON).
	LaneKeys     []int64 `json:"-"`
	LaneMessages []int64 `json:"-"`
}

// Spread is the minimum, maximum and mean of a per-lane figure.
type Spread struct {
	Min  int64   `json:"min"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
}

type LaneLoad struct {
	Lane      string `json:"lane"`
	Partition int    `json:"partition"`
	Keys      int64  `json:"keys"`
	Messages  int64  `json:"messages"`
}

// KeyLoad is one of the hottest keys: Count is its messages.
type KeyLoad struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Lane  string `json:"lane"`
}

// Skew computes the summary; top is how many hottest lanes and keys to list.
func (t *Tally) Skew(p *Plan, top int) Skew {
	s := Skew{Lines: t.lines, LaneMessages: append([]int64(nil), t.messages...)}
	s.LaneKeys, s.KeysApprox = t.keys.distinct()
	s.MessagesPerLane, s.Messages = spread(s.LaneMessages)
	s.KeysPerLane, s.Keys = spread(s.LaneKeys)
	for _, k := range s.LaneKeys {
		if k == 0 {
			s.Empty++
		}
	}
	if s.MessagesPerLane.Mean > 0 {
		s.MaxToMean = float64(s.MessagesPerLane.Max) / s.MessagesPerLane.Mean
	}
	order := make([]int, len(t.messages))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return t.messages[order[a]] > t.messages[order[b]] })
	for _, i := range order[:min(top, len(order))] {
		s.HotLanes = append(s.HotLanes, LaneLoad{Lane: p.Lanes[i].Name, Partition: i, Keys: s.LaneKeys[i], Messages: t.messages[i]})
	}
	for _, e := range t.keys.top(top) {
		s.HotKeys = append(s.HotKeys, KeyLoad{Key: e.key, Count: e.count, Lane: p.Lanes[e.partition].Name})
	}
	s.HotKeysApprox, s.MaxError = t.keys.approximate()
	return s
}

// spread summarises per-lane figures and returns their sum.
func spread(v []int64) (Spread, int64) {
	if len(v) == 0 {
		return Spread{}, 0
	}
	s := Spread{Min: v[0], Max: v[0]}
	var total int64
	for _, x := range v {
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
		total = satAdd(total, x)
	}
	s.Mean = float64(total) / float64(len(v))
	return s, total
}
