package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// BenchmarkInspectProcess measures what a user waits for: the whole
// `lanes inspect -o json` process (start, connect, read, judge, print)
// against an embedded server with N lanes, first idle (no messages), then
// with a backlog on every lane (the costly case: one head lookup per lane).
// When natscli is on PATH, each iteration also runs `nats consumer report`
// on the same stream and the ratio is reported; CI has no natscli and
// reports lanes alone.
//
//	go test -run '^$' -bench BenchmarkInspectProcess -benchtime 20x .
func BenchmarkInspectProcess(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "lanes")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	nats, _ := exec.LookPath("nats")
	for _, n := range []int{256, 1024, 4096} {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			srv := natstest.Start(b)
			_, js := natstest.Connect(b, srv.URL())
			p := testutil.PlanDesign(b, planner.Design{Name: "bench", Subject: "bench.received_from.*", Partitions: n})
			natstest.CreateLanes(b, js, p)
			lanesArgs := []string{"inspect", "--server", srv.URL(), "--stream", p.Stream.Name, "-o", "json"}
			natsArgs := []string{"consumer", "report", p.Stream.Name, "--server", srv.URL()}
			b.Run("idle", func(b *testing.B) { compareProcesses(b, bin, nats, lanesArgs, natsArgs) })
			natstest.PublishAsync(b, js, backlogSubjects(p, 4)...)
			b.Run("backlog", func(b *testing.B) { compareProcesses(b, bin, nats, lanesArgs, natsArgs) })
		})
	}
}

// compareProcesses runs lanes (and natscli, when given) once per iteration,
// alternating so both see the same machine.
func compareProcesses(b *testing.B, bin, nats string, lanesArgs, natsArgs []string) {
	var lanesTime, natsTime time.Duration
	for b.Loop() {
		lanesTime += runProcess(b, bin, lanesArgs...)
		if nats != "" {
			natsTime += runProcess(b, nats, natsArgs...)
		}
	}
	b.ReportMetric(float64(lanesTime.Microseconds())/1000/float64(b.N), "lanes-ms/op")
	if nats == "" {
		b.Log("natscli (nats) not on PATH: comparison skipped")
		return
	}
	b.ReportMetric(float64(natsTime.Microseconds())/1000/float64(b.N), "nats-ms/op")
	b.ReportMetric(float64(lanesTime)/float64(natsTime), "lanes/nats")
}

// backlogSubjects returns per subjects for every partition of p, found in
// one pass over generated keys.
func backlogSubjects(p *planner.Plan, per int) []string {
	n := p.Design.Partitions
	count := make([]int, n)
	var out []string
	for i, full := 0, 0; full < n; i++ {
		s := fmt.Sprintf("bench.received_from.k%d", i)
		part, _ := p.Layout.PartitionOf([]byte(s))
		if count[part] < per {
			out = append(out, s)
			if count[part]++; count[part] == per {
				full++
			}
		}
	}
	return out
}

// runProcess runs a command to completion and returns its wall time.
// (Its peak memory cannot be read from here: on Linux a child's maxrss
// counts the forked image of this process. See docs/inspect.md for
// /usr/bin/time figures, and BenchmarkRead in health for allocations.)
func runProcess(b *testing.B, bin string, args ...string) time.Duration {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	start := time.Now()
	out, err := cmd.Output()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return d
}
