package commands

import (
	"bytes"
	"strings"
	"testing"

	goldenfile "github.com/lanes-dev/lanes/internal/golden"
)

// run calls Main in-process like a user typing lanes ARGS.
func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errw bytes.Buffer
	code = Main(append([]string{"lanes"}, args...), strings.NewReader(stdin), &out, &errw)
	return out.String(), errw.String(), code
}

// golden compares got with testdata/NAME: go test ./commands -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, name, []byte(got))
}
