package actions

import (
	"fmt"
	"testing"

	"github.com/lanes-dev/lanes/planner"
)

// TestKeyFilter: the filter of a key's messages keeps the key's tokens and
// the partition, and makes the other tokens wildcards.
func TestKeyFilter(t *testing.T) {
	for _, c := range []struct {
		source, dest, subject, want string
	}{
		{"msgs.received_from.*", "msgs.received_from.n8.{{partition(8,1)}}.{{wildcard(1)}}", "msgs.received_from.alice", ""},
		{"dev.*.*", "dev.n4.{{partition(4,1)}}.{{wildcard(1)}}.{{wildcard(2)}}", "dev.d7.temp", "dev.n4.%d.d7.*"},
	} {
		l, err := planner.ParseLayout(c.source, c.dest)
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := l.Transform(c.subject)
		want := stored
		if c.want != "" {
			p, _ := l.PartitionOf([]byte(c.subject))
			want = fmt.Sprintf(c.want, p)
		}
		if got, ok := keyFilter(l, c.subject); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", c.subject, got, ok, want)
		}
	}
}

// TestByOrigin: replay order is by key, then by the sequence each message
// first had (a copy parked again keeps its first).
func TestByOrigin(t *testing.T) {
	ms := []ParkedMsg{{Seq: 1, Key: "b", OriginSeq: 9}, {Seq: 2, Key: "a", OriginSeq: 90, ReplayedFrom: 5}, {Seq: 3, Key: "a", OriginSeq: 7}}
	byOrigin(ms)
	if ms[0].Seq != 2 || ms[1].Seq != 3 || ms[2].Seq != 1 {
		t.Fatalf("order: %+v", ms)
	}
}
