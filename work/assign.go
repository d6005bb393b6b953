package work

import (
	"hash/fnv"
	"slices"
	"sort"
)

// Assign decides which member serves each lane: a pure function of the
// member and lane names, so every instance that sees the same membership
// computes the same answer with no coordination.
//
// It is balanced: with N lanes and M members every member gets ⌊N/M⌋ or
// ⌈N/M⌉ lanes. It moves few lanes when a member joins or leaves: each
// (lane, member) pair has a score (rendezvous hashing), and the pairs are
// taken from the highest score down, a lane going to the first member that
// still has room. That greedy order is the unique stable matching for
// these scores, so a member's arrival or departure only disturbs the lanes
// whose top choices it changes, and the capacity limits.
//
// Duplicate names are ignored. With no members, no lane is assigned.
func Assign(members, lanes []string) map[string]string {
	members = uniqueSorted(members)
	lanes = uniqueSorted(lanes)
	out := make(map[string]string, len(lanes))
	if len(members) == 0 || len(lanes) == 0 {
		return out
	}
	if len(members) == 1 {
		for _, l := range lanes {
			out[l] = members[0]
		}
		return out
	}
	type pair struct {
		score        uint64
		lane, member int
	}
	laneHash := make([]uint64, len(lanes))
	for i, l := range lanes {
		laneHash[i] = hashString(l)
	}
	memberHash := make([]uint64, len(members))
	for j, m := range members {
		memberHash[j] = hashString(m)
	}
	pairs := make([]pair, 0, len(lanes)*len(members))
	for i := range lanes {
		for j := range members {
			pairs = append(pairs, pair{mix(laneHash[i] ^ mix(memberHash[j])), i, j})
		}
	}
	sort.Slice(pairs, func(a, b int) bool {
		pa, pb := pairs[a], pairs[b]
		if pa.score != pb.score {
			return pa.score > pb.score
		}
		if pa.lane != pb.lane {
			return pa.lane < pb.lane
		}
		return pa.member < pb.member
	})
	// Every member may hold q lanes; r of them (whichever get there
	// first) may hold one more. The capacities add up to exactly N, so
	// every lane finds a member.
	q, r := len(lanes)/len(members), len(lanes)%len(members)
	held := make([]int, len(members))
	owner := make([]int, len(lanes))
	for i := range owner {
		owner[i] = -1
	}
	extra, left := 0, len(lanes)
	for _, p := range pairs {
		if owner[p.lane] >= 0 {
			continue
		}
		switch {
		case held[p.member] < q:
		case held[p.member] == q && extra < r:
			extra++
		default:
			continue
		}
		held[p.member]++
		owner[p.lane] = p.member
		if left--; left == 0 {
			break
		}
	}
	for i, l := range lanes {
		out[l] = members[owner[i]]
	}
	return out
}

// LanesOf lists the lanes an assignment gives to member, sorted.
func LanesOf(assignment map[string]string, member string) []string {
	var out []string
	for lane, m := range assignment {
		if m == member {
			out = append(out, lane)
		}
	}
	sort.Strings(out)
	return out
}

func uniqueSorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// mix is the splitmix64 finalizer: FNV alone spreads similar names
// (orders-n8-01, orders-n8-02) poorly in the high bits the order uses.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
