package render

import (
	"testing"

	goldenfile "github.com/lanes-dev/lanes/internal/golden"
)

// golden compares got with testdata/name.golden: go test ./render -update rewrites them.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, name+".golden", got)
}
