package planner

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
)

func mustPlan(t testing.TB, d Design) *Plan {
	t.Helper()
	p, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The hand-rolled hash equals hash/fnv's FNV-1a, which the server uses.
func TestPartitionIsFNV1a(t *testing.T) {
	for _, key := range []string{"", "alice", "bob", "carol", "日本", strings.Repeat("x", 300)} {
		h := fnv.New32a()
		h.Write([]byte(key))
		for _, n := range []int{1, 2, 7, 8, 13, 1024} {
			if got, want := Partition([]byte(key), n), int(h.Sum32()%uint32(n)); got != want {
				t.Fatalf("Partition(%q, %d) = %d, want %d", key, n, got, want)
			}
		}
	}
}

// Known placements of the seed keys (checked against a live server by the
// parity tests); they anchor the golden outputs.
func TestSeedPlacements(t *testing.T) {
	p := mustPlan(t, seed())
	want := map[string]int{"alice": 7, "bob": 4, "carol": 2}
	a := NewAssigner(p)
	for key, part := range want {
		got, err := a.Assign(key)
		if err != nil {
			t.Fatal(err)
		}
		if got.Partition != part || got.Lane != fmt.Sprintf("orders-n8-%02d", part) || got.Subject != "msgs.received_from."+key {
			t.Fatalf("%s: %+v", key, got)
		}
	}
}

// Multi-token keys are hashed in argument order with no separator.
func TestMultiTokenKeyConcatenation(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "t.*.x.*", KeyTokens: []int{2, 1}, Partitions: 97})
	part, ok := p.Layout.PartitionOf([]byte("t.abc.x.de"))
	if !ok || part != Partition([]byte("deabc"), 97) {
		t.Fatalf("got %d, want hash of token2+token1", part)
	}
	a, _ := p.Layout.PartitionOf([]byte("t.c.x.ab"))
	b, _ := p.Layout.PartitionOf([]byte("t.bc.x.a"))
	if a != b {
		t.Fatal("ab+c and a+bc must collide, as on the server")
	}
	if k := p.Layout.Key([]byte("t.abc.x.de")); k != "de.abc" {
		t.Fatalf("key %q", k)
	}
}

func TestTransformPlacedUnmapRoundTrip(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "tenants.*.devices.*.events.*", KeyTokens: []int{1, 2}, Partitions: 12})
	subj := "tenants.acme.devices.pump-1.events.temperature"
	stored, ok := p.Layout.Transform(subj)
	if !ok {
		t.Fatal("no match")
	}
	part, _ := p.Layout.PartitionOf([]byte(subj))
	if want := fmt.Sprintf("tenants.n12.%d.acme.devices.pump-1.events.temperature", part); stored != want {
		t.Fatalf("stored %q, want %q", stored, want)
	}
	pl := p.Layout.Placed(stored)
	if !pl.Matches || pl.Partition != part || pl.Expected != part {
		t.Fatalf("placed %+v", pl)
	}
	wrong := strings.Replace(stored, fmt.Sprintf(".n12.%d.", part), fmt.Sprintf(".n12.%d.", (part+1)%12), 1)
	if pl := p.Layout.Placed(wrong); !pl.Matches || pl.Partition == pl.Expected {
		t.Fatalf("a message published around the mapping must show a mismatch: %+v", pl)
	}
	if back, ok := p.Layout.Unmap(stored); !ok || back != subj {
		t.Fatalf("unmap %q", back)
	}
	if f, ok := p.Layout.PartitionOfFilter(p.Lanes[5].Filter); !ok || f != 5 {
		t.Fatalf("filter partition %d %v", f, ok)
	}
	for _, f := range []string{"tenants.n12.5.>", "tenants.n12.12.*.devices.*.events.*", "tenants.n12.05.*.devices.*.events.*", "tenants.n8.5.*.devices.*.events.*"} {
		if _, ok := p.Layout.PartitionOfFilter(f); ok {
			t.Fatalf("%q is not exactly one partition", f)
		}
	}
	if subj2, err := p.SubjectForKey("acme.pump-1"); err != nil || subj2 != "tenants.acme.devices.pump-1.events.x" {
		t.Fatalf("subject for key: %q %v", subj2, err)
	}
}

func TestPlaceLines(t *testing.T) {
	p := mustPlan(t, seed())
	a := NewAssigner(p)
	cases := []struct {
		line    string
		ok      bool
		subject string
		count   int64
		err     string
	}{
		{"alice", true, "msgs.received_from.alice", 1, ""},
		{"msgs.received_from.bob", true, "msgs.received_from.bob", 1, ""},
		{"  carol   12 ", true, "msgs.received_from.carol", 12, ""},
		{"", false, "", 0, ""},
		{"# a comment", false, "", 0, ""},
		{"msgs.other.bob", false, "", 0, "does not match"},
		{"msgs.received_from.bob.extra", false, "", 0, "does not match"},
		{"msgs.received_from.*", false, "", 0, "does not match"},
		{"bob twelve", false, "", 0, "message count"},
		{"bob -1", false, "", 0, "message count"},
	}
	for i, tc := range cases {
		got, ok, err := a.Place(i+1, []byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), fmt.Sprintf("line %d", i+1)) {
				t.Fatalf("%q: error %v, want %q with the line number", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || ok != tc.ok || (ok && (string(got.Subject) != tc.subject || got.Count != tc.count)) {
			t.Fatalf("%q: %+v %v %v", tc.line, got, ok, err)
		}
	}
	// A bare key is only accepted when the pattern has exactly one '*'.
	multi := NewAssigner(mustPlan(t, Design{Name: "d", Subject: "a.*.*"}))
	if _, _, err := multi.Place(1, []byte("alice")); err == nil {
		t.Fatal("a bare key is ambiguous for a two-token pattern")
	}
}

func TestSkew(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "k.*", Partitions: 4})
	a := NewAssigner(p)
	tally := NewTally(4)
	for i := 0; i < 1000; i++ {
		pl, _, err := a.Place(i+1, []byte(fmt.Sprintf("k.user%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		tally.Add(pl)
	}
	hot, _, _ := a.Place(1, []byte("k.hot 5000"))
	tally.Add(hot)
	s := tally.Skew(p, 3)
	if s.Total != 6000 || s.Lines != 1001 {
		t.Fatalf("totals %+v", s)
	}
	var sum int64
	for _, c := range s.PerLane {
		sum += c
	}
	if sum != 6000 || s.Mean != 1500 || s.Max < 5000 || s.MaxToMean != float64(s.Max)/1500 {
		t.Fatalf("skew %+v", s)
	}
	if c := s.HotKeys[0].Count; s.HotKeys[0].Key != "hot" || c < 5000-s.MaxError || c > 5000+s.MaxError || s.HotKeys[0].Lane != p.Lanes[hot.Partition].Name {
		t.Fatalf("hottest key %+v", s.HotKeys[0])
	}
	if s.HotLanes[0].Partition != hot.Partition {
		t.Fatalf("hottest lane %+v", s.HotLanes[0])
	}
}

// The heavy-hitters sketch keeps bounded memory and still finds keys that
// are hot among a million distinct ones.
func TestHotKeysBoundedMemory(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "k.*", Partitions: 8})
	a := NewAssigner(p)
	tally := NewTally(8)
	for i := 0; i < 1_000_000; i++ {
		line := fmt.Sprintf("k.u%d", i)
		if i%10 == 0 {
			line = "k.whale"
		} else if i%25 == 0 {
			line = "k.dolphin"
		}
		pl, _, _ := a.Place(i, []byte(line))
		tally.Add(pl)
	}
	if n := len(tally.hot.heap); n > HotKeyCapacity {
		t.Fatalf("tracking %d keys, bound is %d", n, HotKeyCapacity)
	}
	s := tally.Skew(p, 2)
	if s.HotKeys[0].Key != "whale" || s.HotKeys[1].Key != "dolphin" || !s.HotKeysApprox {
		t.Fatalf("hot keys %+v", s.HotKeys)
	}
	// Estimates are within the total subtracted of the truth.
	if c := s.HotKeys[0].Count; c < 100_000-s.MaxError || c > 100_000+s.MaxError {
		t.Fatalf("whale count %d, error bound %d", c, s.MaxError)
	}
}
