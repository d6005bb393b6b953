package input

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// chunked hands out data in pieces of the sizes it is told, like a pipe.
type chunked struct {
	data  []byte
	sizes []byte
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, errEOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[0])+1)
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

var errEOF = io.EOF

// FuzzLines: whatever the bytes and however a pipe splits them, Lines
// yields exactly the lines bytes.Split finds (line endings removed), in
// order and numbered, or refuses a line over MaxLine.
func FuzzLines(f *testing.F) {
	f.Add([]byte("alice\nbob 3\r\n\ncarol"), []byte{0, 3, 200})
	f.Add([]byte("\n\n\r\n"), []byte{})
	f.Add(bytes.Repeat([]byte("x"), 3000), []byte{255, 255})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		s, _ := Open(context.Background(), Stdin, &chunked{data: append([]byte(nil), data...), sizes: sizes})
		defer s.Close()
		var got [][]byte
		err := s.Lines(context.Background(), func(n int, l []byte) error {
			if n != len(got)+1 {
				t.Fatalf("line %d numbered %d", len(got)+1, n)
			}
			got = append(got, append([]byte(nil), l...))
			return nil
		})
		want := bytes.Split(data, []byte("\n"))
		if len(data) == 0 || data[len(data)-1] == '\n' {
			want = want[:len(want)-1]
		}
		var tooLong *LineTooLongError
		if errors.As(err, &tooLong) {
			for i, l := range want[:tooLong.Line-1] {
				if !bytes.Equal(got[i], bytes.TrimSuffix(l, []byte("\r"))) {
					t.Fatalf("line %d differs before the long line", i+1)
				}
			}
			if len(want[tooLong.Line-1]) <= MaxLine {
				t.Fatalf("line %d (%d bytes) refused as too long", tooLong.Line, len(want[tooLong.Line-1]))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], bytes.TrimSuffix(want[i], []byte("\r"))) {
				t.Fatalf("line %d: %q, want %q", i+1, got[i], want[i])
			}
		}
	})
}
