// Package input reads what a command is given: a file, stdin, a pipe, a
// named FIFO or a process substitution. Every source is read once, as a
// stream, and every wait gives up when the context ends: opening a FIFO
// that no writer opens, and reading a pipe that never sends, both return
// at once on cancellation instead of holding the process.
package input

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MaxLine is the longest line Lines accepts.
const MaxLine = 1 << 20

// chunkSize is how much one read asks for; cancellation is checked at
// least once per chunk.
const chunkSize = 64 << 10

// checkEvery is how many lines pass between cancellation checks when
// chunks are full of short lines.
const checkEvery = 256

// Stdin is the path that names standard input.
const Stdin = "-"

// Source is one opened input.
type Source struct {
	name   string // for messages: the file's base name, or "stdin"
	file   *os.File
	pump   *pump
	closed bool
}

// Error is an input that cannot be opened or read.
type Error struct {
	Name string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Name, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// LineTooLongError is a line longer than MaxLine.
type LineTooLongError struct {
	Name string
	Line int
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("%s: line %d is longer than %d MiB: one line holds one subject", e.Name, e.Line, MaxLine>>20)
}

// Open opens path for reading; "-" is stdin. It waits for a FIFO's writer,
// and gives up when ctx ends.
func Open(ctx context.Context, path string, stdin io.Reader) (*Source, error) {
	if path == Stdin {
		if stdin == nil {
			stdin = os.Stdin
		}
		return &Source{name: "stdin", pump: newPump(stdin)}, nil
	}
	name := filepath.Base(path)
	f, err := openFile(ctx, path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Name: path, Err: plainPathError(err)}
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, &Error{Name: path, Err: errors.New("is a directory, not a file")}
	}
	return &Source{name: name, file: f, pump: newPump(f)}, nil
}

// plainPathError drops the "open PATH:" prefix the caller already names.
func plainPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openFile opens path in a goroutine: open(2) of a FIFO blocks until a
// writer opens it, and cannot be interrupted otherwise. On cancellation the
// blocked open is woken by opening the FIFO's other end, so the goroutine
// ends and the file is closed.
func openFile(ctx context.Context, path string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	select {
	case o := <-ch:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		wakeFIFO(path)
		return nil, ctx.Err()
	}
}

// wakeFIFO opens a FIFO for writing without blocking and closes it again:
// a reader blocked in open(2) returns and then reads end-of-file.
func wakeFIFO(path string) {
	st, err := os.Stat(path)
	if err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		return
	}
	if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
}

// Name is the source's name for messages: the file's base name or "stdin".
func (s *Source) Name() string { return s.name }

// Close stops reading and closes the file. A read still blocked on a pipe
// that never sends is abandoned (the process can exit regardless).
func (s *Source) Close() error {
	if s == nil || s.closed {
		return nil
	}
	s.closed = true
	s.pump.stop()
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}

// Lines calls fn with each line, numbered from 1, without its line ending.
// The slice is valid only during the call. It stops at the first error fn
// returns, when ctx ends (returning ctx.Err()), or at a line longer than
// MaxLine (a *LineTooLongError).
func (s *Source) Lines(ctx context.Context, fn func(n int, line []byte) error) error {
	var carry []byte // a line that spans chunks
	line := 0
	emit := func(l []byte) error {
		line++
		if line%checkEvery == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		return fn(line, bytes.TrimSuffix(l, []byte("\r")))
	}
	for {
		data, rerr := s.pump.next(ctx)
		if rerr != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if len(carry)+len(data) > MaxLine {
					return &LineTooLongError{Name: s.name, Line: line + 1}
				}
				carry = append(carry, data...)
				break
			}
			l := data[:i]
			if len(carry) > 0 {
				if len(carry)+i > MaxLine {
					return &LineTooLongError{Name: s.name, Line: line + 1}
				}
				carry = append(carry, l...)
				l = carry
			}
			if len(l) > MaxLine {
				return &LineTooLongError{Name: s.name, Line: line + 1}
			}
			if err := emit(l); err != nil {
				return err
			}
			carry = carry[:0]
			data = data[i+1:]
		}
		switch {
		case rerr == io.EOF:
			if len(carry) > 0 {
				return emit(carry)
			}
			return nil
		case rerr != nil:
			return &Error{Name: s.name, Err: plainPathError(rerr)}
		}
	}
}

// ReadAll reads the whole source, refusing more than limit bytes.
func (s *Source) ReadAll(ctx context.Context, limit int) ([]byte, error) {
	var out []byte
	for {
		data, err := s.pump.next(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if len(out)+len(data) > limit {
			return nil, &Error{Name: s.name, Err: fmt.Errorf("larger than %d KiB", limit>>10)}
		}
		out = append(out, data...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, &Error{Name: s.name, Err: plainPathError(err)}
		}
	}
}

// pump reads the source in its own goroutine, so that a consumer waiting
// for data can give up on cancellation while read(2) stays blocked. Two
// buffers alternate: the pump fills one while the consumer uses the other.
type pump struct {
	src    io.Reader
	chunks chan chunk
	done   chan struct{}
	bufs   [2][]byte
	start  bool
	eof    error // the last error, once the pump has ended
}

type chunk struct {
	data []byte
	err  error
}

func newPump(r io.Reader) *pump {
	return &pump{src: r, chunks: make(chan chunk), done: make(chan struct{}),
		bufs: [2][]byte{make([]byte, chunkSize), make([]byte, chunkSize)}}
}

func (p *pump) run() {
	for i := 0; ; i ^= 1 {
		n, err := p.src.Read(p.bufs[i])
		if n == 0 && err == nil {
			continue
		}
		select {
		case p.chunks <- chunk{p.bufs[i][:n], err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// next returns the next chunk of data; the previous one may be reused from
// now on. err is io.EOF at the end, or ctx.Err() on cancellation.
func (p *pump) next(ctx context.Context) ([]byte, error) {
	if p.eof != nil {
		return nil, p.eof
	}
	if !p.start {
		p.start = true
		go p.run()
	}
	select {
	case c := <-p.chunks:
		if c.err != nil {
			p.eof = c.err
		}
		return c.data, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pump) stop() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
}
