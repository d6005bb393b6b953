package commands

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// run calls Main in-process like a user typing lanes ARGS.
func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errw bytes.Buffer
	code = Main(append([]string{"lanes"}, args...), strings.NewReader(stdin), &out, &errw)
	return out.String(), errw.String(), code
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./commands -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s (go test ./commands -run %s -update to accept):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}
