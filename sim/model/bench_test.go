package model_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/model"
	"github.com/lanes-dev/lanes/sim/strategy"
	"github.com/lanes-dev/lanes/sim/workload"
)

// BenchmarkModel is the model's cost for a backlog over 64 lanes, two
// workers each, 10,000 uniform keys and exponential processing time. The
// ns/msg metric should stay flat from 100k to 1M messages (linear cost):
//
//	go test ./sim/model -run '^$' -bench Model -benchtime 3x
func BenchmarkModel(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			k := workload.Keys{}
			for i := range 10_000 {
				name := fmt.Sprintf("k%d", i)
				k.Add(name, "s."+name, 1)
			}
			w, err := workload.Generate(workload.Spec{Keys: k, Messages: n, Process: workload.Process{Kind: "exp", Mean: 5 * time.Millisecond}, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			cfg := model.Config{Strategy: strategy.Lanes, Partitions: 64, WorkersPerLane: 2, KeyPartition: modulo(10_000, 64),
				Lane: model.Lane{AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 1}}
			b.ResetTimer()
			for range b.N {
				if _, err := model.Run(context.Background(), w, cfg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/msg")
		})
	}
}
