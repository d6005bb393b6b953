package converge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// Benchmarks for 1,024 lanes on one embedded server, one connection:
//
//	go test ./converge -run '^$' -bench 1024 -benchtime 5x
//
// BenchmarkRawCreate1024 is the floor: the same stream and consumers
// created with the jetstream package, 32 requests in flight. Targets:
// a fresh apply within 2x of it, a no-op apply at least 10x cheaper than
// a fresh one.

const benchLanes = 1024

func benchPlan(b *testing.B, i int) *planner.Plan {
	d := testutil.Seed(benchLanes)
	d.Stream.Name = fmt.Sprintf("BENCH_%d", i)
	return testutil.PlanDesign(b, d)
}

func BenchmarkApplyFresh1024(b *testing.B) { benchFresh(b, converge.DefaultConcurrency) }

// BenchmarkApplyFresh1024Concurrency is how DefaultConcurrency was chosen.
func BenchmarkApplyFresh1024Concurrency(b *testing.B) {
	for _, n := range []int{1, 8, 32, 128} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchFresh(b, n) })
	}
}

func benchFresh(b *testing.B, concurrency int) {
	srv := natstest.Start(b)
	c := open(b, srv.URL())
	_, js := natstest.Connect(b, srv.URL())
	natstest.KeepAccountStreams(b, js)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := benchPlan(b, i)
		b.StartTimer()
		_, res, err := converge.Apply(context.Background(), c, p, converge.Options{Concurrency: concurrency})
		if err != nil || res.Created != benchLanes {
			b.Fatalf("apply: %v", err)
		}
		b.StopTimer()
		if err := js.DeleteStream(context.Background(), p.Stream.Name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkRawCreate1024(b *testing.B) {
	srv := natstest.Start(b)
	_, js := natstest.Connect(b, srv.URL())
	natstest.KeepAccountStreams(b, js)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := benchPlan(b, i)
		cfgs := make([]jetstream.ConsumerConfig, len(p.Consumers))
		for j, pc := range p.Consumers {
			raw, _ := json.Marshal(pc)
			if err := json.Unmarshal(raw, &cfgs[j]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: p.Stream.Name, Subjects: p.Stream.Subjects, MaxConsumers: p.Stream.MaxConsumers,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: p.Mapping.Source, Destination: p.Mapping.Destination}}); err != nil {
			b.Fatal(err)
		}
		sem := make(chan struct{}, converge.DefaultConcurrency)
		var wg sync.WaitGroup
		errs := make(chan error, len(cfgs))
		for _, cfg := range cfgs {
			sem <- struct{}{}
			wg.Add(1)
			go func(cfg jetstream.ConsumerConfig) {
				defer wg.Done()
				defer func() { <-sem }()
				if _, err := js.CreateConsumer(ctx, p.Stream.Name, cfg); err != nil {
					errs <- err
				}
			}(cfg)
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := js.DeleteStream(ctx, p.Stream.Name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkApplyNoop1024(b *testing.B) {
	srv := natstest.Start(b)
	c := open(b, srv.URL())
	p := benchPlan(b, 0)
	if _, _, err := converge.Apply(context.Background(), c, p, converge.Options{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, res, err := converge.Apply(context.Background(), c, p, converge.Options{})
		if err != nil || d.Pending() || res.WriteRequests != 0 {
			b.Fatalf("not a no-op: %v", err)
		}
	}
}
