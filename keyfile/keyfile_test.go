package keyfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/keyfile"
	"github.com/lanes-dev/lanes/planner"
)

func seedPlan(t *testing.T) *planner.Plan {
	t.Helper()
	p := testutil.PlanDesign(t, testutil.Seed(8))
	return p
}

// placed is what Each hands on, copied out of the reader's scratch space.
type placed struct {
	subject, key string
	partition    int
	count        int64
}

func readAll(t *testing.T, in keyfile.Input) ([]placed, error) {
	t.Helper()
	ctx := context.Background()
	r, err := keyfile.Open(ctx, in, seedPlan(t))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []placed
	err = r.Each(ctx, func(p planner.Parsed) error {
		out = append(out, placed{string(p.Subject), string(p.Key), p.Partition, p.Count})
		return nil
	})
	return out, err
}

// Subjects and bare keys are placed with their counts; blank lines and
// comments are skipped.
func TestEachPlacesEveryLine(t *testing.T) {
	in := keyfile.Input{Path: "-", Stdin: strings.NewReader("# users\nalice 90\n\nmsgs.received_from.bob 5\ncarol\n"), Flag: "--keys"}
	got, err := readAll(t, in)
	if err != nil {
		t.Fatal(err)
	}
	p := seedPlan(t)
	want := []placed{{"msgs.received_from.alice", "alice", 0, 90}, {"msgs.received_from.bob", "bob", 0, 5}, {"msgs.received_from.carol", "carol", 0, 1}}
	for i := range want {
		part, _ := p.Layout.PartitionOf([]byte(want[i].subject))
		want[i].partition = part
	}
	if len(got) != len(want) {
		t.Fatalf("placed %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Every error names the input as the user gave it: a flag and the file's
// name, or a prefix the name joins.
func TestErrorsNameTheInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "keys.txt")
	os.WriteFile(bad, []byte("alice\nnope.bob\n"), 0o644)
	missing := filepath.Join(dir, "missing.txt")
	for _, tc := range []struct {
		in   keyfile.Input
		want string
	}{
		{keyfile.Input{Path: bad, Flag: "--keys"}, `--keys keys.txt line 2: "nope.bob" does not match`},
		{keyfile.Input{Path: bad, Flag: "--keys file:"}, `--keys file:keys.txt line 2: "nope.bob" does not match`},
		{keyfile.Input{Path: missing, Flag: "--keys"}, "--keys " + missing + ": no such file or directory"},
		{keyfile.Input{Path: missing, Flag: "--keys file:"}, "--keys file: " + missing + ": no such file or directory"},
		{keyfile.Input{Path: dir, Flag: "--keys"}, "--keys " + dir + ": is a directory"},
		{keyfile.Input{Path: "-", Stdin: strings.NewReader("alice\n" + strings.Repeat("x", 2<<20)), Flag: "--keys"}, "--keys stdin: line 2 is longer than 1 MiB"},
	} {
		_, err := readAll(t, tc.in)
		var ke *keyfile.Error
		if !errors.As(err, &ke) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v (%T), want a *keyfile.Error starting %q", tc.in, err, err, tc.want)
		}
	}
}

// The caller's errors and a cancellation stay what they are.
func TestEachKeepsOtherErrors(t *testing.T) {
	ctx := context.Background()
	r, err := keyfile.Open(ctx, keyfile.Input{Path: "-", Stdin: strings.NewReader("alice\nbob\n"), Flag: "--keys"}, seedPlan(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := errors.New("enough")
	if err := r.Each(ctx, func(planner.Parsed) error { return stop }); err != stop {
		t.Fatalf("each's error came back as %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := keyfile.Open(cancelled, keyfile.Input{Path: filepath.Join(t.TempDir(), "x"), Flag: "--keys"}, seedPlan(t)); err != context.Canceled {
		t.Fatalf("a cancelled open: %v", err)
	}
}

// The spool gives back every line added, in order, to the byte.
func TestSpoolReplaysInOrder(t *testing.T) {
	sp, err := keyfile.NewSpool("--keys")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	want := []placed{{"a.b", "b", 3, 1}, {"msgs.received_from." + strings.Repeat("z", 70_000), strings.Repeat("z", 70_000), 0, 1 << 40}, {"", "", 0, 0}}
	for i := range 10_000 {
		want = append(want, placed{"s.k" + string(rune('a'+i%26)), "k", i % 64, int64(i)})
	}
	for _, w := range want {
		if err := sp.Add(planner.Parsed{Subject: []byte(w.subject), Key: []byte(w.key), Partition: w.partition, Count: w.count}); err != nil {
			t.Fatal(err)
		}
	}
	var got []placed
	err = sp.Replay(context.Background(), func(subject, key []byte, partition int, count int64) error {
		got = append(got, placed{string(subject), string(key), partition, count})
		return nil
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("replayed %d of %d: %v", len(got), len(want), err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
