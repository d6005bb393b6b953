package planner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseDesignFileAndLines(t *testing.T) {
	src := `name: orders
subject: msgs.received_from.*
partitions: 16
stream:
  name: ORDERS
  replicas: 3
lane:
  ack_wait: 45s
  backoff: [45s, 2m]
  max_deliver: 5
`
	d, err := ParseDesign([]byte(src), "lanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d.Partitions != 16 || d.Stream.Replicas != 3 || d.Lane.AckWait.D() != 45*time.Second || len(d.Lane.BackOff) != 2 {
		t.Fatalf("parsed %+v", d)
	}
	if d.Origin["lane.ack_wait"] != "lanes.yaml:8" || d.Origin["stream.replicas"] != "lanes.yaml:6" {
		t.Fatalf("origins %v", d.Origin)
	}
	if _, err := New(d); err != nil {
		t.Fatal(err)
	}
}

func TestParseDesignJSON(t *testing.T) {
	d, err := ParseDesign([]byte(`{"name": "orders", "subject": "msgs.*", "lane": {"ack_wait": "1m"}}`), "lanes.json")
	if err != nil || d.Lane.AckWait.D() != time.Minute {
		t.Fatalf("%v %+v", err, d)
	}
}

// TestBadDesignFiles: errors name the file and line, and what is wrong.
func TestBadDesignFiles(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"unknown field", "name: o\nsubject: a.*\npartitons: 8\n", []string{"lanes.yaml:3", `unknown field "partitons"`}},
		{"unknown nested field", "name: o\nsubject: a.*\nlane:\n  ackwait: 3s\n", []string{"lanes.yaml:4", `"ackwait"`}},
		{"malformed", "name: o\nsubject: [a.*\n", []string{"lanes.yaml"}},
		{"tabs", "name: o\n\tsubject: a.*\n", []string{"lanes.yaml:2"}},
		{"bad duration", "name: o\nsubject: a.*\nlane:\n  ack_wait: soon\n", []string{"lanes.yaml:4", `"soon" is not a duration`}},
		{"number as duration", "name: o\nsubject: a.*\nlane:\n  ack_wait: [1]\n", []string{"lanes.yaml:4", "duration"}},
		{"text as number", "name: o\nsubject: a.*\npartitions: eight\n", []string{"lanes.yaml:3", `"eight" is not a whole number`}},
		{"weighted destination", "name: o\nsubject: a.*\ndestination:\n  - {destination: a.x, weight: 50}\n", []string{"lanes.yaml:4", "weighted"}},
		{"empty", "  \n", []string{"lanes.yaml", "empty"}},
		{"two documents", "name: o\nsubject: a.*\n---\nname: p\n", []string{"more than one document"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDesign([]byte(tc.src), "lanes.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// A validation error on a value from the file names its line.
func TestValidationNamesFileLine(t *testing.T) {
	d, err := ParseDesign([]byte("name: o\nsubject: a.*\nlane:\n  max_ack_pending: 0\n"), "lanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(d)
	if err == nil || !strings.HasPrefix(err.Error(), "lanes.yaml:4: lane.max_ack_pending") {
		t.Fatalf("got %v", err)
	}
}

// The shipped examples must plan cleanly.
func TestExamplesPlan(t *testing.T) {
	files, _ := filepath.Glob("../examples/*/lanes.yaml")
	if len(files) < 2 {
		t.Fatalf("expected at least two examples, found %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseDesign(data, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := New(d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestDesignWholeNumbers: a fraction where the field is whole is an error
// naming the line and the field, never silently truncated.
func TestDesignWholeNumbers(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{"partitions: 8.5", "lanes.yaml:3: partitions \"8.5\": not a whole number"},
		{"stream:\n  replicas: 1.5", "lanes.yaml:4: stream.replicas \"1.5\": not a whole number"},
		{"lane:\n  max_ack_pending: 1.9", "lanes.yaml:4: lane.max_ack_pending \"1.9\": not a whole number"},
		{"lane:\n  max_deliver: 2.7", "lanes.yaml:4: lane.max_deliver \"2.7\": not a whole number"},
		{"key_tokens: [1.5]", "lanes.yaml:3: key_tokens \"1.5\": not a whole number"},
		{"partitions: .inf", "not a whole number"},
	} {
		_, err := ParseDesign([]byte("name: a\nsubject: a.*\n"+tc.body+"\n"), "lanes.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q: got %v, want %q", tc.body, err, tc.field)
		}
	}
	d, err := ParseDesign([]byte("name: a\nsubject: a.*\npartitions: 8.0\n"), "lanes.yaml")
	if err != nil || d.Partitions != 8 {
		t.Fatalf("8.0 is whole: %v %d", err, d.Partitions)
	}
}

// TestDestinationBounds: an adopted destination's partition count obeys
// the same bound as --partitions.
func TestDestinationBounds(t *testing.T) {
	for _, n := range []string{"20000", "4294967296", "0", "-3"} {
		_, err := New(Design{Name: "a", Subject: "a.*", Destination: Destination("a.{{partition(" + n + ",1)}}.{{wildcard(1)}}")})
		if err == nil || !strings.Contains(err.Error(), "partition count") {
			t.Errorf("partition(%s): %v", n, err)
		}
	}
	p, err := New(Design{Name: "a", Subject: "a.*", Destination: "a.{{partition(16384,1)}}.{{wildcard(1)}}"})
	if err != nil || len(p.Lanes) != MaxPartitions {
		t.Fatalf("the bound itself is allowed: %v", err)
	}
}
