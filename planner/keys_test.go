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

// StoredKey reads the key back from a stored subject, and refuses one of
// another shape (the worker reads every message's key with it).
func TestStoredKey(t *testing.T) {
	one := mustPlan(t, seed())
	two := mustPlan(t, Design{Name: "d", Subject: "tenants.*.devices.*.events.*", KeyTokens: []int{2, 1}, Partitions: 12})
	for _, tc := range []struct {
		p      *Plan
		stored string
		key    string
		ok     bool
	}{
		{one, "msgs.received_from.n8.7.alice", "alice", true},
		{two, "tenants.n12.3.acme.devices.pump-1.events.temperature", "pump-1.acme", true},
		{one, "msgs.received_from.n8.7", "", false},
		{one, "msgs.received_from.n8.7.alice.extra", "", false},
		{one, "msgs.sent_to.n8.7.alice", "", false},
		{one, "", "", false},
		{two, "tenants.n12.3.acme.devices.pump-1.events", "", false},
	} {
		key, ok := tc.p.Layout.StoredKey(tc.stored)
		if key != tc.key || ok != tc.ok {
			t.Errorf("StoredKey(%q) = %q, %v; want %q, %v", tc.stored, key, ok, tc.key, tc.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { one.Layout.StoredKey("msgs.received_from.n8.7.alice") }); n != 0 {
		t.Errorf("a one-token key costs %v allocations, want none", n)
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
	if s.Messages != 6000 || s.Lines != 1001 || s.Keys != 1001 || s.KeysApprox {
		t.Fatalf("totals %+v", s)
	}
	var sum int64
	for _, c := range s.LaneMessages {
		sum += c
	}
	m := s.MessagesPerLane
	if sum != 6000 || m.Mean != 1500 || m.Max < 5000 || s.MaxToMean != float64(m.Max)/1500 {
		t.Fatalf("skew %+v", s)
	}
	if h := s.HotKeys[0]; h.Key != "hot" || h.Count != 5000 || s.HotKeysApprox || h.Lane != p.Lanes[hot.Partition].Name {
		t.Fatalf("few keys are counted exactly: hottest key %+v", h)
	}
	if s.HotLanes[0].Partition != hot.Partition || s.HotLanes[0].Messages != m.Max {
		t.Fatalf("hottest lane %+v", s.HotLanes[0])
	}
}

// TestKeysAndMessages: a lane's distinct keys and its messages are two
// figures: two keys with 15,300 messages are 2 keys, not 15,300.
func TestKeysAndMessages(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "k.*", Partitions: 8})
	a := NewAssigner(p)
	tally := NewTally(8)
	for _, line := range []string{"k.alice 15000", "k.alice 200", "k.x 100"} {
		pl, _, _ := a.Place(1, []byte(line))
		tally.Add(pl)
	}
	s := tally.Skew(p, 8)
	alice, _ := p.Layout.PartitionOf([]byte("k.alice"))
	x, _ := p.Layout.PartitionOf([]byte("k.x"))
	wantKeys := map[int]int64{alice: 1}
	wantKeys[x]++
	for i := range p.Lanes {
		if s.LaneKeys[i] != wantKeys[i] {
			t.Fatalf("lane %d: %d keys, want %d", i, s.LaneKeys[i], wantKeys[i])
		}
	}
	if s.LaneMessages[alice] < 15200 || s.Keys != 2 || s.Messages != 15300 || s.Lines != 3 {
		t.Fatalf("skew %+v", s)
	}
}

// TestDistinctKeysEstimated: beyond the exact limit, distinct keys per lane
// are estimated within a few percent; repeated keys are not counted twice.
func TestDistinctKeysEstimated(t *testing.T) {
	p := mustPlan(t, Design{Name: "d", Subject: "k.*", Partitions: 8})
	a := NewAssigner(p)
	tally := NewTally(8)
	truth := make([]int64, 8)
	for i := 0; i < 100_000; i++ {
		pl, _, _ := a.Place(1, []byte(fmt.Sprintf("k.u%d", i)))
		truth[pl.Partition]++
		tally.Add(pl)
		tally.Add(pl) // each key twice: still one key
	}
	s := tally.Skew(p, 1)
	if !s.KeysApprox || s.Messages != 200_000 {
		t.Fatalf("skew %+v", s)
	}
	for i, got := range s.LaneKeys {
		if d := float64(got-truth[i]) / float64(truth[i]); d > 0.05 || d < -0.05 {
			t.Fatalf("lane %d: estimated %d distinct keys, truth %d", i, got, truth[i])
		}
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
	if n := len(tally.keys.heap); n > HotKeyCapacity || tally.keys.exact != nil {
		t.Fatalf("tracking %d keys, bound is %d", n, HotKeyCapacity)
	}
	s := tally.Skew(p, 2)
	if s.HotKeys[0].Key != "whale" || s.HotKeys[1].Key != "dolphin" || !s.HotKeysApprox {
		t.Fatalf("hot keys %+v", s.HotKeys)
	}
	// Estimates are never below the truth, and above it by at most the bound.
	if c := s.HotKeys[0].Count; c < 100_000 || c > 100_000+s.MaxError {
		t.Fatalf("whale count %d, error bound %d", c, s.MaxError)
	}
}

// TestLineErrorQuoted: a bad line is quoted cut and escaped, never whole.
func TestLineErrorQuoted(t *testing.T) {
	p := mustPlan(t, seed())
	a := NewAssigner(p)
	long := "x.y." + strings.Repeat("a", 1<<20)
	_, _, err := a.Place(7, []byte(long))
	if err == nil || len(err.Error()) > 300 || !strings.Contains(err.Error(), "line 7:") || !strings.Contains(err.Error(), "1048580 bytes") {
		t.Fatalf("%d bytes: %.300s", len(err.Error()), err)
	}
	_, _, err = a.Place(2, []byte("x.\x1b[2J\u202e.z"))
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\u202e") || !strings.Contains(err.Error(), `\x1b[2J\u202e`) {
		t.Fatalf("escape sequences must be escaped: %q", err)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"alice":                 "alice",
		"日本":                    "日本",
		"a\x1b[31mb":            `a\x1b[31mb`,
		"\u202eevil":            `\u202eevil`,
		"bad\xffutf8":           `bad\xffutf8`,
		strings.Repeat("x", 12): "xxxxxxxxxx... (12 bytes)",
	} {
		if got := Printable(in, 10); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Quote("日本語", 4); got != `"日"... (9 bytes)` {
		t.Errorf("a cut never splits a character: %s", got)
	}
}
