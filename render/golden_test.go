package render

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update rewrites the golden files: go test ./render -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/name.golden (or rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./render -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s (go test ./render -update rewrites it):\n--- got ---\n%s\n--- want ---\n%s", name, path, got, want)
	}
}
