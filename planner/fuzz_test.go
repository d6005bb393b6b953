package planner

import (
	"strings"
	"testing"
)

// FuzzDesign feeds arbitrary design files to the parser and planner: they
// must never panic, and every accepted design must give a consistent plan.
func FuzzDesign(f *testing.F) {
	f.Add([]byte("name: orders\nsubject: msgs.received_from.*\npartitions: 8\n"))
	f.Add([]byte("name: d\nsubject: t.*.d.*.e.*\nkey_tokens: [2, 1]\npartitions: 13\nmapping: account\n"))
	f.Add([]byte("name: d\nsubject: a.*\ndestination: a.{{partition(3,1)}}.{{wildcard(1)}}\n"))
	f.Add([]byte(`{"name": "x", "subject": "*", "lane": {"backoff": ["1s"], "max_deliver": 2}}`))
	f.Add([]byte("name: d\nsubject: a.*\nlane:\n  pinned: true\n  pinned_ttl: 5s\n"))
	f.Add([]byte("name: d\nsubject: a.*.b.*\ndestination: a.n2.{{partition(2,2,1)}}.{{wildcard(1)}}.b.{{wildcard(2)}}\n"))
	f.Add([]byte("name: d\nsubject: a.*\ndestination: a.{{partition(20000,1)}}.{{wildcard(1)}}\n"))
	f.Add([]byte("name: d\nsubject: a.*\ndestination: a.{{partition(4294967296,1)}}.{{wildcard(1)}}\n"))
	f.Add([]byte("name: d\nsubject: a.*\npartitions: 8.5\nlane:\n  max_ack_pending: 1.9\n"))
	f.Add([]byte(`{"name": "x", "subject": "a.*", "partitions": 1e3, "stream": {"replicas": 1.5}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDesign(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if d.Partitions > 64 && d.Destination == "" {
			d.Partitions = 64 // keep iterations fast; the limits are tested elsewhere
		}
		p, err := New(d)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if err := CheckPartitions(len(p.Lanes)); err != nil {
			t.Fatalf("planned %d lanes: %v", len(p.Lanes), err)
		}
		checkPlan(t, p)
	})
}

func checkPlan(t *testing.T, p *Plan) {
	t.Helper()
	if len(p.Lanes) != p.Design.Partitions || len(p.Consumers) != len(p.Lanes) {
		t.Fatalf("%d lanes, %d consumers for %d partitions", len(p.Lanes), len(p.Consumers), p.Design.Partitions)
	}
	names := map[string]bool{}
	for i, l := range p.Lanes {
		if names[l.Name] {
			t.Fatalf("duplicate lane name %s", l.Name)
		}
		names[l.Name] = true
		if got, ok := p.Layout.PartitionOfFilter(l.Filter); !ok || got != i {
			t.Fatalf("lane %d filter %q reads back as %d %v", i, l.Filter, got, ok)
		}
		if !validName(l.Name) || !validSubject(l.Filter) {
			t.Fatalf("invalid lane %+v", l)
		}
	}
	if p.Stream.MaxConsumers != -1 && p.Stream.MaxConsumers < len(p.Lanes) {
		t.Fatalf("max_consumers %d below %d lanes", p.Stream.MaxConsumers, len(p.Lanes))
	}
	// A subject built for a key lands in the lane whose filter covers it.
	subj, err := p.SubjectForKey(strings.Repeat("k.", len(p.Layout.KeyTokens)-1) + "k")
	if err != nil {
		t.Fatal(err)
	}
	stored, ok := p.Layout.Transform(subj)
	if !ok {
		t.Fatalf("own subject %q does not match", subj)
	}
	part, _ := p.Layout.PartitionOf([]byte(subj))
	if !subjectMatches(p.Lanes[part].Filter, stored) {
		t.Fatalf("stored %q not covered by lane filter %q", stored, p.Lanes[part].Filter)
	}
}

func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	if len(f) != len(s) {
		return false
	}
	for i := range f {
		if f[i] != "*" && f[i] != s[i] {
			return false
		}
	}
	return true
}

// FuzzPlace: any input line is either placed consistently or rejected.
func FuzzPlace(f *testing.F) {
	for _, s := range []string{"alice", "msgs.received_from.bob 3", "msgs..x", "a b c", "msgs.received_from.*", "#x", "日本"} {
		f.Add(s)
	}
	p, err := New(seed())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a := NewAssigner(p)
		got, ok, err := a.Place(1, []byte(line))
		if err != nil || !ok {
			return
		}
		want, match := p.Layout.PartitionOf(got.Subject)
		if !match || want != got.Partition || got.Partition < 0 || got.Partition >= 8 {
			t.Fatalf("%q placed in %d, PartitionOf says %d %v", line, got.Partition, want, match)
		}
	})
}

// FuzzParseLayout: arbitrary destinations are parsed or rejected, never
// accepted with an out-of-range token.
func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{"a.{{partition(8,1)}}.{{wildcard(1)}}", "a.{{random(3)}}", "{{partition(2,1,1)}}.{{wildcard(1)}}", "a.{{ partition(4, 1) }}.{{wildcard(1)}}", "a.p{{partition(3,1)}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dest string) {
		l, err := ParseLayout("a.*", dest)
		if err != nil {
			return
		}
		if l.Partitions < 1 || len(l.KeyTokens) == 0 {
			t.Fatalf("accepted %q with %d partitions, keys %v", dest, l.Partitions, l.KeyTokens)
		}
		for i := 0; i < min(l.Partitions, 16); i++ {
			if p, ok := l.PartitionOfFilter(l.Filter(i)); !ok || p != i {
				t.Fatalf("%q: filter %d reads back as %d", dest, i, p)
			}
		}
	})
}
