package work

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

func counts(a map[string]string) map[string]int {
	c := map[string]int{}
	for _, m := range a {
		c[m]++
	}
	return c
}

func moved(a, b map[string]string) int {
	n := 0
	for lane, m := range a {
		if o, ok := b[lane]; ok && o != m {
			n++
		}
	}
	return n
}

// TestAssignBalanced: every member gets ⌊N/M⌋ or ⌈N/M⌉ lanes, every lane
// one member, for many sizes.
func TestAssignBalanced(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 8, 16, 24, 100, 1024} {
		for _, m := range []int{1, 2, 3, 4, 5, 7, 16, 33} {
			lanes, members := names("orders-n8", n), names("host", m)
			a := Assign(members, lanes)
			if len(a) != n {
				t.Fatalf("N=%d M=%d: %d lanes assigned", n, m, len(a))
			}
			lo, hi := n/m, (n+m-1)/m
			c := counts(a)
			for _, mem := range members {
				if c[mem] < lo || c[mem] > hi {
					t.Fatalf("N=%d M=%d: %s holds %d lanes, want %d..%d", n, m, mem, c[mem], lo, hi)
				}
			}
		}
	}
}

// TestAssignDeterministic: the order and duplicates of the inputs do not
// matter, so every instance computes the same owners.
func TestAssignDeterministic(t *testing.T) {
	lanes, members := names("orders-n16", 16), []string{"a", "b", "c"}
	want := Assign(members, lanes)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		l := append([]string(nil), lanes...)
		m := append([]string{"b"}, members...)
		r.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
		r.Shuffle(len(m), func(i, j int) { m[i], m[j] = m[j], m[i] })
		got := Assign(m, l)
		for lane, owner := range want {
			if got[lane] != owner {
				t.Fatalf("shuffle %d: %s -> %s, want %s", i, lane, got[lane], owner)
			}
		}
	}
}

func TestAssignEmpty(t *testing.T) {
	if a := Assign(nil, names("l", 4)); len(a) != 0 {
		t.Errorf("no members: %v", a)
	}
	if a := Assign([]string{"a"}, nil); len(a) != 0 {
		t.Errorf("no lanes: %v", a)
	}
	a := Assign([]string{"a"}, names("l", 3))
	if got := LanesOf(a, "a"); len(got) != 3 {
		t.Errorf("one member holds %v", got)
	}
}

// TestAssignMovesFew: a member joining or leaving moves few lanes. The
// least possible is the newcomer's share (join) or the leaver's lanes
// (leave); the capacity limits move a few more, mostly when members hold
// only a lane or two each. Over 20 random namings per size: the mean is
// within 1.6x the least once members hold 16+ lanes (3x below), and no
// single change moves more than 3x the least plus 3.
func TestAssignMovesFew(t *testing.T) {
	for _, n := range []int{16, 64, 256, 1024} {
		for _, m := range []int{2, 3, 4, 7, 12} {
			var movedSum, leastSum int
			for trial := 0; trial < 20; trial++ {
				lanes := names(fmt.Sprintf("d%d", trial), n)
				members := names(fmt.Sprintf("i%d", trial), m)
				before := Assign(members, lanes)
				check := func(what string, after map[string]string, least int) {
					got := moved(before, after)
					movedSum += got
					leastSum += least
					if got > 3*least+3 {
						t.Errorf("N=%d M=%d %s moved %d lanes, least possible %d", n, m, what, got, least)
					}
				}
				check("join", Assign(append(members, fmt.Sprintf("new%d", trial)), lanes), n/(m+1))
				gone := members[trial%m]
				var rest []string
				for _, x := range members {
					if x != gone {
						rest = append(rest, x)
					}
				}
				check("leave", Assign(rest, lanes), counts(before)[gone])
			}
			ratio := float64(movedSum) / float64(leastSum)
			limit := 3.0
			if n/m >= 16 {
				limit = 1.6
			}
			if ratio > limit {
				t.Errorf("N=%d M=%d: moved %.2fx the least on average, want <= %.1fx", n, m, ratio, limit)
			}
			t.Logf("N=%4d M=%2d: moved %.2fx the least possible", n, m, ratio)
		}
	}
}

func BenchmarkAssign(b *testing.B) {
	for _, size := range []struct{ n, m int }{{1024, 4}, {1024, 32}, {16384, 8}} {
		b.Run(fmt.Sprintf("lanes=%d/members=%d", size.n, size.m), func(b *testing.B) {
			lanes, members := names("orders", size.n), names("host", size.m)
			for b.Loop() {
				Assign(members, lanes)
			}
		})
	}
}

// A log line names up to 16 lanes, and counts the rest.
func TestFewNames(t *testing.T) {
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("orders-n40-%02d", i))
	}
	if got := fewNames(names[:16]); len(got) != 16 || got[15] != "orders-n40-15" {
		t.Fatalf("16 names: %v", got)
	}
	got := fewNames(names)
	if len(got) != 13 || got[11] != "orders-n40-11" || got[12] != "and 28 more" {
		t.Fatalf("40 names: %v", got)
	}
	if names[12] != "orders-n40-12" {
		t.Fatal("the caller's slice was changed")
	}
}
