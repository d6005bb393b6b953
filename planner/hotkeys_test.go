package planner

import (
	"fmt"
	"testing"
)

// oldCells is where the first version of the sketch put a key: every row's
// cell came from the low 11 bits of two 32-bit halves of one FNV-64 hash,
// so keys that agree on 22 bits share a cell in every row. The test uses
// it to build an adversarial input: keys that defeated that sketch.
func oldCells(key []byte) [4]uint32 {
	hash := uint64(14695981039346656037)
	for _, c := range key {
		hash ^= uint64(c)
		hash *= 1099511628211
	}
	h1, h2 := uint32(hash), uint32(hash>>32)|1
	var out [4]uint32
	for i := range out {
		out[i] = (h1 + uint32(i)*h2) % 2048
	}
	return out
}

// collidingKeys finds n keys that share every cell with target under oldCells.
func collidingKeys(t *testing.T, target string, n int) []string {
	t.Helper()
	want := oldCells([]byte(target))
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 200_000_000 {
			t.Fatal("no colliding keys found")
		}
		k := fmt.Sprintf("x%d", i)
		if oldCells([]byte(k)) == want {
			out = append(out, k)
		}
	}
	return out
}

// TestHotKeysAdversarial: keys seen once that share the hot key's cells
// must never be reported hottest, nor with a count above the stated bound.
func TestHotKeysAdversarial(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "k.*", Partitions: 8})
	a := NewAssigner(p)
	tally := NewTally(8)
	add := func(line string) {
		pl, ok, err := a.Place(1, []byte("k."+line))
		if err != nil || !ok {
			t.Fatal(line, err)
		}
		tally.Add(pl)
	}
	for i := 0; i < 20_000; i++ { // enough distinct keys for the sketch
		add(fmt.Sprintf("filler%d", i))
	}
	add("hot 50000")
	once := collidingKeys(t, "hot", 3)
	for _, k := range once {
		add(k)
	}
	s := tally.Skew(p, 10)
	if s.HotKeys[0].Key != "hot" {
		t.Fatalf("hottest key %+v, want hot (%d lines, error bound %d)", s.HotKeys[0], s.Lines, s.MaxError)
	}
	for _, h := range s.HotKeys {
		truth := int64(1)
		if h.Key == "hot" {
			truth = 50000
		}
		if h.Count < truth || h.Count > truth+s.MaxError {
			t.Fatalf("key %s counted %d, truth %d, stated bound %d", h.Key, h.Count, truth, s.MaxError)
		}
	}
}
