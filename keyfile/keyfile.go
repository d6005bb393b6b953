// Package keyfile reads a keys input, as lanes plan --keys and lanes
// simulate --keys file: take it: one published subject (or bare key) per
// line, an optional message count after it, blank lines and '#' comments
// skipped. The input is read once (a file, stdin, a pipe or a FIFO), and
// every line is placed in its lane of a plan. A Spool keeps the placed
// lines to replay them once the whole input is known to be good.
package keyfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/planner"
)

// Input is a keys input and how errors name it.
type Input struct {
	// Path is a file, input.Stdin ("-") for Stdin, a pipe or a FIFO.
	Path  string
	Stdin io.Reader
	// Flag names the input in errors as the user gave it: a flag
	// ("--keys"), then a space and the file's name; or a prefix of the
	// name that ends in ':' and joins it ("--keys file:").
	Flag string
}

// Error is a keys input that cannot be used: it cannot be opened or read,
// a line is too long, or a line does not fit the plan. Nothing was placed
// that counts.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Reader is an open keys input.
type Reader struct {
	in  Input
	src *input.Source
	a   *planner.Assigner
}

// Open opens the input for placing its lines in p's lanes. It waits for
// a FIFO's writer, and gives up when ctx ends (returning ctx.Err()).
func Open(ctx context.Context, in Input, p *planner.Plan) (*Reader, error) {
	src, err := input.Open(ctx, in.Path, in.Stdin)
	if err != nil {
		return nil, in.fault(err)
	}
	return &Reader{in: in, src: src, a: planner.NewAssigner(p)}, nil
}

// Name is the input as errors name it, e.g. "--keys file:keys.txt".
func (r *Reader) Name() string {
	if strings.HasSuffix(r.in.Flag, ":") {
		return r.in.Flag + r.src.Name()
	}
	return r.in.Flag + " " + r.src.Name()
}

// Each reads the input to its end, placing every line and handing it to
// each; the Parsed value's bytes are valid only during the call. It stops
// at the first error: the input's own as an *Error, each's and ctx.Err()
// as they are.
func (r *Reader) Each(ctx context.Context, each func(planner.Parsed) error) error {
	err := r.src.Lines(ctx, func(n int, line []byte) error {
		p, ok, err := r.a.Place(n, line)
		if err != nil {
			return &Error{fmt.Errorf("%s %v", r.Name(), err)}
		}
		if !ok {
			return nil
		}
		return each(p)
	})
	return r.in.fault(err)
}

// Close stops reading and closes the input.
func (r *Reader) Close() error { return r.src.Close() }

// fault makes an input that cannot be opened or read an *Error naming it;
// other errors (a cancellation, the caller's) stay as they are.
func (in Input) fault(err error) error {
	var ie *input.Error
	var le *input.LineTooLongError
	if errors.As(err, &ie) || errors.As(err, &le) {
		return &Error{fmt.Errorf("%s %v", in.Flag, err)}
	}
	return err
}
