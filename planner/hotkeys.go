package planner

import (
	"container/heap"
	"math"
	"sort"
)

// hotKeys finds the hottest keys in bounded memory whatever the number of
// distinct keys: a count-min sketch estimates every key's count (never
// below the truth, above it by at most e/width of all lines, with
// probability 1 - e^-depth), and a min-heap keeps the k keys with the
// largest estimates. A line costs a few array increments; the heap moves
// only for keys that are, or become, among the hottest.
type hotKeys struct {
	sketch [sketchDepth][sketchWidth]int64
	total  int64
	heap   hotHeap
	index  map[uint64]int // key hash -> position in heap
	k      int
	seen   bool // a key was ever dropped from the heap
}

const (
	sketchDepth = 4
	sketchWidth = 2048
)

type hotEntry struct {
	hash      uint64
	key       []byte
	count     int64
	partition int
}

func newHotKeys(k int) *hotKeys {
	return &hotKeys{k: k, index: make(map[uint64]int, k)}
}

// keyHash is FNV-1a 64 of the key: unlike the 32-bit partition hash it
// tells "ab.c" from "a.bc".
func keyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

func (h *hotKeys) add(key []byte, partition int, n int64) {
	hash := keyHash(key)
	h.total += n
	// Row i uses hash1 + i*hash2 (Kirsch-Mitzenmacher): one hash, four rows.
	h1, h2 := uint32(hash), uint32(hash>>32)|1
	est := int64(math.MaxInt64)
	for i := range h.sketch {
		c := &h.sketch[i][(h1+uint32(i)*h2)%sketchWidth]
		*c += n
		est = min(est, *c)
	}
	if i, ok := h.index[hash]; ok {
		h.heap[i].count = est
		heap.Fix(h, i)
		return
	}
	if len(h.heap) < h.k {
		heap.Push(h, hotEntry{hash: hash, key: append([]byte(nil), key...), count: est, partition: partition})
		return
	}
	if est <= h.heap[0].count {
		return
	}
	h.seen = true
	old := &h.heap[0]
	delete(h.index, old.hash)
	old.hash, old.key, old.count, old.partition = hash, append(old.key[:0], key...), est, partition
	h.index[hash] = 0
	heap.Fix(h, 0)
}

type hotKey struct {
	key       string
	count     int64
	partition int
}

// top returns the n keys with the largest estimated counts.
func (h *hotKeys) top(n int) []hotKey {
	all := make([]hotKey, len(h.heap))
	for i, e := range h.heap {
		all[i] = hotKey{key: string(e.key), count: e.count, partition: e.partition}
	}
	sort.Slice(all, func(a, b int) bool {
		if all[a].count != all[b].count {
			return all[a].count > all[b].count
		}
		return all[a].key < all[b].key
	})
	return all[:min(n, len(all))]
}

// approximate reports whether the counts are estimates, and by how much a
// reported count may exceed the truth (e/width of all lines, with
// probability 1 - e^-depth; exact while no two keys share a sketch cell).
func (h *hotKeys) approximate() (bool, int64) {
	if !h.seen && len(h.index) < sketchWidth/64 {
		return false, 0
	}
	return true, int64(math.Ceil(math.E / sketchWidth * float64(h.total)))
}

// hotHeap is a min-heap of entries by count, keeping index in step.
type hotHeap []hotEntry

func (h *hotKeys) Len() int           { return len(h.heap) }
func (h *hotKeys) Less(i, j int) bool { return h.heap[i].count < h.heap[j].count }
func (h *hotKeys) Swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.index[h.heap[i].hash], h.index[h.heap[j].hash] = i, j
}
func (h *hotKeys) Push(x any) {
	e := x.(hotEntry)
	h.index[e.hash] = len(h.heap)
	h.heap = append(h.heap, e)
}
func (h *hotKeys) Pop() any {
	e := h.heap[len(h.heap)-1]
	h.heap = h.heap[:len(h.heap)-1]
	delete(h.index, e.hash)
	return e
}
