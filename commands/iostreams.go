package commands

import (
	"io"
	"os"

	"github.com/mattn/go-isatty"
)

// IO holds the streams a command uses: data to Out, progress and
// diagnostics to Err. Tests pass buffers, which are never terminals.
type IO struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	InTTY  bool
	OutTTY bool
	ErrTTY bool
}

func newIO(in io.Reader, out, errw io.Writer) *IO {
	return &IO{In: in, Out: out, Err: errw, InTTY: isTerminal(in), OutTTY: isTerminal(out), ErrTTY: isTerminal(errw)}
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
