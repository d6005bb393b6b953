// Package scalebench holds the scale benchmarks of issue 18: what lanes
// costs a nats-server at thousands of lanes, and how fast it drains. They
// are behind the build tag `scale`, so CI (go vet ./..., go test ./...)
// never runs them; without the tag this package is this comment alone.
//
// Everything runs against a nats-server of its own process (built from the
// module's nats-server with go build, started with -js on a free port and
// a fresh store), so that its CPU time is read from /proc/<pid>/stat
// apart from the client's. The CLI (`lanes apply`, `inspect`, `work`) is
// the binary built from this module, run as a user runs it.
//
// BenchmarkScale, per lane count (a fresh server each):
//   - apply fresh and apply no-op: wall time of the `lanes apply` process;
//   - inspect: wall time of `lanes inspect -o json`;
//   - the server's idle CPU (% of one core) with nothing attached, then
//     with `lanes work` attached and idle (its ratio to the first), and
//     lanes work's own idle CPU;
//   - time to serve: from the start of `lanes work` until its /readyz says
//     it serves every lane (the lanes_work_serving gauge: lanes it took);
//   - a repartition to 16 partitions: its apply, and the time from the end
//     of that apply until lanes work serves all 16 new lanes (its /metrics).
//
// BenchmarkScaleDrain, per lane count (a fresh server each): a design
// applied with the CLI, a backlog published with keys on every lane, then
// drained by the work package (work.New, a no-op handler) in the benchmark
// process: messages per second, the server's CPU seconds per 100k
// messages, this process's CPU per message (both between the first and
// the last message).
//
// BenchmarkScaleDrain16VsConsume: on one server, 16 serial lanes, rounds
// taken in turns, each on a fresh backlog: the work package's no-op drain
// against a standing-pull Consume loop with fire-and-forget acks (what
// orbit.go's pcgroups runs). x-consume is work/consume; the bar is
// at least 1.0.
//
// Run (10 to 20 minutes with every default on a 2-core machine):
//
//	go test -tags scale -run '^$' -bench . -benchtime 1x -timeout 60m ./internal/scalebench
//
// Environment:
//
//	LANES_SCALE_LANES=4096,16384              BenchmarkScale's lane counts
//	LANES_SCALE_IDLE=30s                      each idle CPU window
//	LANES_SCALE_DRAIN_LANES=16,1024,4096,16384 BenchmarkScaleDrain's lane counts
//	LANES_SCALE_MSGS=N                        messages per drain (default 100,000 up to
//	                                          1,024 lanes, 20,000 up to 4,096, 2 per lane above)
//	LANES_SCALE_ROUNDS=5                      rounds of BenchmarkScaleDrain16VsConsume
//	LANES_SCALE_ONLY=work|consume             run one side of it only (for -cpuprofile)
package scalebench
