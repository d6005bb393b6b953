package commands

import (
	"io"
	"strings"
	"testing"
)

// BenchmarkSimulate is lanes simulate as a user runs it, in-process: the
// four default strategies over 100,000 messages, and a sweep of 1..16
// partitions; the model's cost dominates, so the wiring around it must
// stay out of the figures.
//
//	go test ./commands -run '^$' -bench Simulate -benchtime 3x
func BenchmarkSimulate(b *testing.B) {
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"strategies", []string{"--keys", "zipf:1000:1.1", "--messages", "100000", "--process-time", "exp:5ms", "--partitions", "16"}},
		{"sweep", []string{"--keys", "uniform:1000", "--messages", "20000", "--sweep", "1..16", "--target-rate", "1000"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := append([]string{"lanes", "simulate", "-o", "json"}, bc.args...)
			for b.Loop() {
				if code := Main(args, strings.NewReader(""), io.Discard, io.Discard); code != 0 {
					b.Fatalf("exit %d", code)
				}
			}
		})
	}
}
