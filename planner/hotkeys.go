package planner

import (
	"container/heap"
	"math"
	"math/bits"
	"sort"
)

// keyStats counts keys in bounded memory whatever their number. While the
// distinct keys are few (exactKeys, exactBytes) every key is counted
// exactly: its messages, its lane, the distinct keys per lane. Beyond
// that it switches, once, to estimates:
//   - the hottest keys: a count-min sketch (conservative update) estimates
//     every key's messages, never below the truth and above it by at most
//     e/width of all messages with probability 1 - e^-depth; a min-heap
//     keeps the k keys with the largest estimates;
//   - distinct keys per lane: a HyperLogLog per lane.
//
// Each sketch row and the HyperLogLog take their own well-mixed hash of
// the key, so keys that collide in one row rarely collide in the others.
type keyStats struct {
	partitions int

	exact      map[string]*exactKey // nil once switched to estimates
	exactBytes int
	laneKeys   []int64 // exact distinct keys per lane

	sketch *[sketchDepth][sketchWidth]int64
	hll    *laneHLL
	heap   hotHeap
	index  map[uint64]int // key hash -> position in heap
	k      int
	total  int64 // messages
}

type exactKey struct {
	count     int64
	partition int
}

const (
	sketchDepth = 4
	sketchBits  = 11
	sketchWidth = 1 << sketchBits
	// Keys are counted exactly up to this many distinct keys and key bytes.
	exactKeys  = 4096
	exactBytes = 4 << 20
	// hllBudget bounds the HyperLogLog registers of all lanes together.
	hllBudget = 4 << 20
)

// rowSeeds make one independent hash per sketch row, and one for the
// HyperLogLog, from the key's 64-bit hash.
var rowSeeds = [sketchDepth + 1]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0x2545f4914f6cdd1d, 0xd6e8feb86659fd93}

func newKeyStats(partitions, k int) *keyStats {
	return &keyStats{partitions: partitions, k: k, exact: map[string]*exactKey{}, laneKeys: make([]int64, partitions)}
}

// keyHash is FNV-1a 64 of the key: unlike the 32-bit partition hash it
// tells "ab.c" from "a.bc". It is only a starting point: mix spreads it.
func keyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// mix is the murmur3 64-bit finalizer: every input bit changes about half
// of the output bits, so h^seed for different seeds gives unrelated values.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (s *keyStats) add(key []byte, partition int, n int64) {
	s.total = satAdd(s.total, n)
	if s.exact != nil {
		if e, ok := s.exact[string(key)]; ok {
			e.count = satAdd(e.count, n)
			return
		}
		if len(s.exact) < exactKeys && s.exactBytes+len(key) <= exactBytes {
			s.exact[string(key)] = &exactKey{count: n, partition: partition}
			s.exactBytes += len(key)
			s.laneKeys[partition]++
			return
		}
		s.estimate()
	}
	s.addEstimated(key, keyHash(key), partition, n)
}

// estimate switches from exact counts to the sketches, carrying every
// exact count over.
func (s *keyStats) estimate() {
	s.sketch = new([sketchDepth][sketchWidth]int64)
	s.hll = newLaneHLL(s.partitions)
	s.index = make(map[uint64]int, s.k)
	keys := make([]string, 0, len(s.exact))
	for k := range s.exact {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same input gives the same estimates
	total := s.total
	for _, k := range keys {
		e := s.exact[k]
		s.addEstimated([]byte(k), keyHash([]byte(k)), e.partition, e.count)
	}
	s.total = total
	s.exact, s.laneKeys = nil, nil
}

func (s *keyStats) addEstimated(key []byte, hash uint64, partition int, n int64) {
	s.hll.add(partition, mix(hash^rowSeeds[sketchDepth]))
	var cells [sketchDepth]*int64
	est := int64(math.MaxInt64)
	for i := range s.sketch {
		cells[i] = &s.sketch[i][mix(hash^rowSeeds[i])>>(64-sketchBits)]
		est = min(est, *cells[i])
	}
	// Conservative update: raise only the cells below the new estimate.
	est = satAdd(est, n)
	for _, c := range cells {
		*c = max(*c, est)
	}
	if i, ok := s.index[hash]; ok {
		s.heap[i].count = est
		heap.Fix(s, i)
		return
	}
	if len(s.heap) < s.k {
		heap.Push(s, hotEntry{hash: hash, key: string(key), count: est, partition: partition})
		return
	}
	if est <= s.heap[0].count {
		return
	}
	old := &s.heap[0]
	delete(s.index, old.hash)
	*old = hotEntry{hash: hash, key: string(key), count: est, partition: partition}
	s.index[hash] = 0
	heap.Fix(s, 0)
}

type hotKey struct {
	key       string
	count     int64
	partition int
}

// top returns the n keys with the most messages (estimated once approximate).
func (s *keyStats) top(n int) []hotKey {
	var all []hotKey
	if s.exact != nil {
		for k, e := range s.exact {
			all = append(all, hotKey{key: k, count: e.count, partition: e.partition})
		}
	} else {
		for _, e := range s.heap {
			all = append(all, hotKey{key: e.key, count: e.count, partition: e.partition})
		}
	}
	sort.Slice(all, func(a, b int) bool {
		if all[a].count != all[b].count {
			return all[a].count > all[b].count
		}
		return all[a].key < all[b].key
	})
	return all[:min(n, len(all))]
}

// approximate reports whether key counts are estimates, and by how much a
// reported count may exceed the truth (e/width of all messages, with
// probability 1 - e^-depth).
func (s *keyStats) approximate() (bool, int64) {
	if s.exact != nil {
		return false, 0
	}
	return true, int64(math.Ceil(math.E / sketchWidth * float64(s.total)))
}

// distinct returns the distinct keys per lane, and whether they are estimates.
func (s *keyStats) distinct() ([]int64, bool) {
	if s.exact != nil {
		return append([]int64(nil), s.laneKeys...), false
	}
	out := make([]int64, s.partitions)
	for p := range out {
		out[p] = s.hll.count(p)
	}
	return out, true
}

// satAdd adds without wrapping around: counts come from input lines.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

type hotEntry struct {
	hash      uint64
	key       string
	count     int64
	partition int
}

// hotHeap is a min-heap of entries by count, keeping index in step.
type hotHeap []hotEntry

func (s *keyStats) Len() int           { return len(s.heap) }
func (s *keyStats) Less(i, j int) bool { return s.heap[i].count < s.heap[j].count }
func (s *keyStats) Swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.index[s.heap[i].hash], s.index[s.heap[j].hash] = i, j
}
func (s *keyStats) Push(x any) {
	e := x.(hotEntry)
	s.index[e.hash] = len(s.heap)
	s.heap = append(s.heap, e)
}
func (s *keyStats) Pop() any {
	e := s.heap[len(s.heap)-1]
	s.heap = s.heap[:len(s.heap)-1]
	delete(s.index, e.hash)
	return e
}

// laneHLL is one HyperLogLog per lane, m registers each, all lanes
// together within hllBudget registers: the standard error 1.04/sqrt(m) is
// 1.6% for up to 1,024 lanes and 6.5% at 16,384.
type laneHLL struct {
	p   uint // m = 2^p
	reg []uint8
}

func newLaneHLL(lanes int) *laneHLL {
	p := uint(12)
	for p > 4 && lanes<<p > hllBudget {
		p--
	}
	return &laneHLL{p: p, reg: make([]uint8, lanes<<p)}
}

func (h *laneHLL) add(lane int, hash uint64) {
	i := lane<<h.p + int(hash>>(64-h.p))
	rho := uint8(bits.LeadingZeros64(hash<<h.p|1<<(h.p-1)) + 1)
	if rho > h.reg[i] {
		h.reg[i] = rho
	}
}

// count estimates a lane's distinct keys (linear counting while registers
// are empty, which is exact-ish for small counts).
func (h *laneHLL) count(lane int) int64 {
	m := 1 << h.p
	regs := h.reg[lane<<h.p : (lane+1)<<h.p]
	sum, zeros := 0.0, 0
	for _, r := range regs {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	mf := float64(m)
	est := 0.7213 / (1 + 1.079/mf) * mf * mf / sum
	if est <= 2.5*mf && zeros > 0 {
		est = mf * math.Log(mf/float64(zeros))
	}
	return int64(math.Round(est))
}
