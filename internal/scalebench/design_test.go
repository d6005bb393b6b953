//go:build scale

package scalebench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/worktest"
	"github.com/lanes-dev/lanes/planner"
)

// writeDesign writes the benchmarks' design with partitions lanes (stream
// SCALE, file storage, limits retention, max_consumers max(1000, 2N): the
// defaults) and returns its path and plan.
func writeDesign(b *testing.B, partitions int) (string, *planner.Plan) {
	b.Helper()
	text := fmt.Sprintf("name: scale\nsubject: scale.received_from.*\npartitions: %d\nstream:\n  name: SCALE\n", partitions)
	path := filepath.Join(b.TempDir(), "lanes.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := planner.ParseDesign([]byte(text), path)
	if err != nil {
		b.Fatal(err)
	}
	p, err := planner.New(d)
	if err != nil {
		b.Fatal(err)
	}
	return path, p
}

// envInts reads a comma-separated list of whole numbers, or def if unset.
func envInts(b *testing.B, name string, def []int) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want whole numbers above 0, comma separated", name, v)
		}
		out = append(out, n)
	}
	return out
}

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	if os.Getenv(name) == "" {
		return def
	}
	return envInts(b, name, nil)[0]
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration, e.g. 30s", name, v)
	}
	return d
}

// figures collects each unit's values over the benchmark's iterations
// and reports their medians.
type figures struct {
	units  []string
	values map[string][]float64
}

func (f *figures) add(unit string, v float64) {
	if f.values == nil {
		f.values = map[string][]float64{}
	}
	if _, ok := f.values[unit]; !ok {
		f.units = append(f.units, unit)
	}
	f.values[unit] = append(f.values[unit], v)
}

func (f *figures) report(b *testing.B) {
	for _, u := range f.units {
		b.ReportMetric(worktest.Median(f.values[u]), u)
	}
}
