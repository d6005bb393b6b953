package commands

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/testutil"
)

// writeSubjects writes n published subjects with a skewed key population.
func writeSubjects(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "subjects.txt")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 200_000)
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "msgs.received_from.user-%d\n", z.Uint64())
	}
	w.Flush()
	f.Close()
	return path
}

// BenchmarkAssignMillion: lanes plan --keys FILE over 1,000,000 subjects,
// against the raw work (read lines, hash, write a result line).
//
//	go test ./commands -run '^$' -bench AssignMillion -benchtime 5x
func BenchmarkAssignMillion(b *testing.B) {
	const n = 1_000_000
	path := writeSubjects(b, n)
	info, _ := os.Stat(path)
	p := testutil.PlanDesign(b, testutil.Seed(64))
	b.Run("raw", func(b *testing.B) {
		b.SetBytes(info.Size())
		for i := 0; i < b.N; i++ {
			rawAssign(b, path, 64)
		}
	})
	for _, format := range []string{"json", "table"} {
		b.Run("lanes-"+format, func(b *testing.B) {
			b.SetBytes(info.Size())
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				o := PlanOptions{IO: &IO{Out: io.Discard, Err: io.Discard}, Plan: p, KeysPath: path, Output: format}
				if err := runPlan(context.Background(), o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rawAssign is the floor: scan, hash the key, write subject and partition.
func rawAssign(b *testing.B, path string, n int) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	w := bufio.NewWriterSize(io.Discard, 256<<10)
	var buf []byte
	for sc.Scan() {
		line := sc.Bytes()
		key := line[strings.LastIndexByte(string(line), '.')+1:]
		h := fnv.New32a()
		h.Write(key)
		buf = append(buf[:0], line...)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, int64(h.Sum32()%uint32(n)), 10)
		buf = append(buf, '\n')
		w.Write(buf)
	}
	w.Flush()
}
