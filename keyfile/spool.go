package keyfile

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/lanes-dev/lanes/input"
	"github.com/lanes-dev/lanes/planner"
)

// Spool keeps placed lines in an anonymous temporary file (input.Spool),
// in input order, to be replayed once: a large input is read once and
// never held in memory. A record is one placed line: partition, count,
// subject and key, each length-prefixed (uvarints).
type Spool struct {
	flag string // names the input in errors, as Input.Flag
	file *input.Spool
	w    *bufio.Writer
	rec  []byte
}

const spoolBuffer = 256 << 10

// NewSpool creates an empty spool; flag names the input in its errors.
func NewSpool(flag string) (*Spool, error) {
	f, err := input.NewSpool()
	if err != nil {
		return nil, fmt.Errorf("%s: cannot create a temporary file for the assignments: %w", flag, err)
	}
	return &Spool{flag: flag, file: f, w: bufio.NewWriterSize(f, spoolBuffer)}, nil
}

// Add appends a placed line.
func (s *Spool) Add(p planner.Parsed) error {
	s.rec = appendRecord(s.rec[:0], p)
	_, err := s.w.Write(s.rec)
	return err
}

// Replay hands every line added, in order, to each; subject and key are
// valid only during the call. It stops at each's first error.
func (s *Spool) Replay(ctx context.Context, each func(subject, key []byte, partition int, count int64) error) error {
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("%s: writing the temporary file: %w", s.flag, err)
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(s.file, spoolBuffer)
	var subject, key []byte
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		partition, err := binary.ReadUvarint(r)
		if err == io.EOF {
			return nil
		}
		count, err2 := binary.ReadUvarint(r)
		var err3, err4 error
		subject, err3 = readBytes(r, subject)
		key, err4 = readBytes(r, key)
		if err := errors.Join(err, err2, err3, err4); err != nil {
			return fmt.Errorf("%s: reading the temporary file back: %w", s.flag, err)
		}
		if err := each(subject, key, int(partition), int64(count)); err != nil {
			return err
		}
	}
}

// Close removes the spool.
func (s *Spool) Close() error { return s.file.Close() }

func appendRecord(b []byte, p planner.Parsed) []byte {
	b = binary.AppendUvarint(b, uint64(p.Partition))
	b = binary.AppendUvarint(b, uint64(p.Count))
	b = binary.AppendUvarint(b, uint64(len(p.Subject)))
	b = append(b, p.Subject...)
	b = binary.AppendUvarint(b, uint64(len(p.Key)))
	return append(b, p.Key...)
}

func readBytes(r *bufio.Reader, buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > input.MaxLine {
		return nil, errors.New("corrupt record")
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err = io.ReadFull(r, buf)
	return buf, err
}
