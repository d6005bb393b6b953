package commands_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/chaos"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// The chaos test runs lanes apply as operators do, against real servers,
// while a publisher numbers every key's messages and a worker per lane
// checks them: returns to earlier partition counts, two applies started at
// once, an operator waiting at the prompt while CI applies, kill -9 at
// random points of create, recreate and repartition followed by a re-run,
// server restarts. At the end: nothing lost, nothing replayed or skipped
// (a message whose ack was lost may come once more: counted as a repeat),
// and inspect finds no warning.
//
// The short form runs in go test with a fixed seed; the long form is
// BenchmarkChaos (figures in docs/performance.md).

// chaosConfig is one chaos run.
type chaosConfig struct {
	seed    uint64
	cluster bool     // a 3-node cluster, R3 stream and lanes
	mapping string   // stream or account
	counts  []int    // partition counts, in order (returns included)
	modes   []string // how repartitions are run (default: every mode)
	// recreates and restarts are extra steps spread among the repartitions.
	recreates, restarts int
	rate, keys          int // messages per second published meanwhile, over keys
}

type chaosStats struct {
	Steps, Applies, Kills, Restarts, LockRefusals, Concurrent, Prompts, Recreates, FlaglessFinish int
}

type chaosEnv struct {
	t          testing.TB
	cfg        chaosConfig
	rng        *rand.Rand
	srv        *natstest.Server
	cl         *natstest.Cluster
	urls       string
	check      *chaos.Checker
	n          int // partition count applied
	mapped     int // partition count of the installed account mapping
	maxWaiting int
	stats      chaosStats
	log        []string
	start      time.Time
}

const chaosStream = "CHAOS"

func newChaos(t testing.TB, cfg chaosConfig) *chaosEnv {
	e := &chaosEnv{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed)), maxWaiting: 512, start: time.Now()}
	if cfg.cluster {
		e.cl = natstest.StartCluster(t, 3)
		e.urls = e.cl.URLs()
	} else {
		e.srv = natstest.Start(t)
		e.urls = e.srv.URL()
	}
	return e
}

func (e *chaosEnv) plan(n int) *planner.Plan {
	p := testutil.PlanDesign(e.t, planner.Design{Name: "chaos", Subject: "chaos.in.*", Partitions: n, Mapping: e.cfg.mapping})
	return p
}

func (e *chaosEnv) args(n int, extra ...string) []string {
	a := []string{"apply", "--yes", "-s", e.urls, "--name", "chaos", "--subject", "chaos.in.*", "--partitions", strconv.Itoa(n),
		"--mapping", e.cfg.mapping, "--ack-wait", "2s", "--max-waiting", strconv.Itoa(e.maxWaiting), "--drain-timeout", "60s", "--timeout", "5s"}
	if e.cfg.cluster {
		a = append(a, "--replicas", "3")
	}
	return append(a, extra...)
}

func (e *chaosEnv) note(format string, args ...any) {
	e.log = append(e.log, fmt.Sprintf("%6.1fs ", time.Since(e.start).Seconds())+fmt.Sprintf(format, args...))
}

func (e *chaosEnv) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("%s\nsteps so far:\n  %s", fmt.Sprintf(format, args...), strings.Join(e.log, "\n  "))
}

// servers are the running nodes.
func (e *chaosEnv) servers() []*natstest.Server {
	if e.cl != nil {
		return e.cl.Servers
	}
	return []*natstest.Server{e.srv}
}

// installMapping is the operator's step for mapping: account: every
// server maps the publish subject to generation n.
func (e *chaosEnv) installMapping(n int) {
	if e.cfg.mapping != planner.MappingAccount {
		return
	}
	p := e.plan(n)
	for _, s := range e.servers() {
		if err := s.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
			e.t.Fatal(err)
		}
	}
	e.mapped = n
}

// restart stops and starts the server (or one cluster node) again; a
// restarted node forgets account mappings set at run time, so they are
// installed again.
func (e *chaosEnv) restart() {
	e.stats.Restarts++
	if e.cl == nil {
		e.srv.Restart()
	} else {
		e.cl.Servers[e.rng.IntN(len(e.cl.Servers))].Restart()
	}
	if e.mapped > 0 {
		e.installMapping(e.mapped)
	}
}

func (e *chaosEnv) settle() {
	if e.cl != nil {
		e.cl.WaitForJetStream()
	}
}

// rerun runs apply until it exits as wanted: after a restart, or on a
// busy machine, a cluster may take a moment to answer for every lane
// (exit 5, 10, 14); anything else is a failure.
func (e *chaosEnv) rerun(args []string, want int) {
	e.t.Helper()
	for attempt := 0; ; attempt++ {
		e.stats.Applies++
		c := runChild(e.t, e.urls, "", 0, args...)
		e.note("apply %s -> exit %d", summary(args), c.code)
		if c.code == want {
			return
		}
		if attempt == 5 || !transient(c.code) {
			e.fatalf("re-run lanes %s: exit %d, want %d\n%s\n%s", strings.Join(args, " "), c.code, want, c.stdout, c.stderr)
		}
		e.settle()
		time.Sleep(time.Second)
	}
}

// summary is the part of apply's arguments that changes between steps.
func summary(args []string) string {
	var out []string
	for i, a := range args {
		switch {
		case a == "--partitions" || a == "--max-waiting":
			out = append(out, a+" "+args[i+1])
		case a == "--recreate" || a == "--mapping-switched":
			out = append(out, a)
		}
	}
	return strings.Join(out, " ")
}

// transient exit codes: a server not answering (yet) for everything.
func transient(code int) bool {
	return contains([]int{commands.ExitIncomplete, commands.ExitConnect, commands.ExitTimeout}, code)
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// modes are the ways one apply is run.
var chaosModes = []string{"plain", "kill", "two-wait", "two-refuse", "prompt", "restart"}

// deck deals every mode at least once, in an order the seed decides.
func (e *chaosEnv) deck(n int, modes []string) []string {
	var out []string
	for len(out) < n {
		out = append(out, modes...)
	}
	e.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:n]
}

// step runs one apply in a mode and leaves the server where an apply
// that exits want would.
func (e *chaosEnv) step(mode string, args []string, want int, killParts []string) {
	e.t.Helper()
	e.stats.Steps++
	e.note("%s: %s", mode, summary(args))
	switch mode {
	case "plain":
		e.rerun(args, want)
	case "kill":
		part := killParts[e.rng.IntN(len(killParts))]
		n := int64(1 + e.rng.IntN(3))
		e.stats.Applies++
		c := runChild(e.t, e.urls, part, n, args...)
		if c.killed {
			e.stats.Kills++
			e.note("killed -9 at %s #%d", part, n)
		} else if c.code != want && !transient(c.code) {
			e.fatalf("lanes %s: exit %d, want %d\n%s", strings.Join(args, " "), c.code, want, c.stderr)
		}
		e.rerun(args, want)
	case "two-wait", "two-refuse":
		e.stats.Concurrent++
		both := args
		if mode == "two-wait" {
			both = append(append([]string(nil), args...), "--lock-timeout", "2m")
		}
		var wg sync.WaitGroup
		var a, b ran
		wg.Add(2)
		go func() { defer wg.Done(); a = runChild(e.t, e.urls, "", 0, both...) }()
		go func() { defer wg.Done(); b = runChild(e.t, e.urls, "", 0, both...) }()
		wg.Wait()
		e.stats.Applies += 2
		e.note("two at once -> exit %d and %d", a.code, b.code)
		for _, c := range []ran{a, b} {
			switch {
			case c.code == want:
			case mode == "two-refuse" && c.code == commands.ExitRefused && strings.Contains(c.stderr, "is locked by another apply"):
				e.stats.LockRefusals++
			case transient(c.code):
			default:
				e.fatalf("two applies at once: exit %d, want %d\n%s\n%s", c.code, want, c.stdout, c.stderr)
			}
		}
		e.rerun(args, want)
	case "prompt":
		e.prompt(args, want)
	case "restart":
		var once sync.Once
		stop := onAPI(e.t, e.urls, "CONSUMER.LIST."+chaosStream, int64(2+e.rng.IntN(3)), func() { once.Do(e.restart) })
		e.stats.Applies++
		c := runChild(e.t, e.urls, "", 0, args...)
		stop()
		e.note("apply across a restart -> exit %d", c.code)
		e.settle()
		e.rerun(args, want)
	}
}

// prompt: an operator runs the same apply without --yes and waits at the
// prompt; CI's apply is refused meanwhile, naming the operator's; the
// operator confirms; CI's re-run then has nothing left to do.
func (e *chaosEnv) prompt(args []string, want int) {
	e.t.Helper()
	e.stats.Prompts++
	var operator []string
	for _, a := range args {
		if a != "--yes" {
			operator = append(operator, a)
		}
	}
	answer, say := io.Pipe()
	prompt := &testutil.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- commands.MainOnTerminal(context.Background(), append([]string{"lanes"}, operator...), answer, io.Discard, prompt)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(prompt.String(), "Apply these changes") {
		select {
		case code := <-done: // nothing to confirm: the diff touched nothing existing
			e.note("operator: nothing to confirm, exit %d", code)
			if code != want {
				e.fatalf("operator's apply: exit %d, want %d\n%s", code, want, prompt)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			e.fatalf("no prompt: %s", prompt)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stats.Applies += 2
	ci := runChild(e.t, e.urls, "", 0, args...)
	if ci.code != commands.ExitRefused || !strings.Contains(ci.stderr, "is locked by another apply") || !strings.Contains(ci.stderr, "pid "+strconv.Itoa(os.Getpid())) {
		e.fatalf("CI's apply while the operator is at the prompt: exit %d, want 4 naming the operator's apply\n%s", ci.code, ci.stderr)
	}
	e.stats.LockRefusals++
	say.Write([]byte("y\n"))
	if code := <-done; code != want {
		e.fatalf("the operator's apply: exit %d, want %d\n%s", code, want, prompt)
	}
	e.note("operator confirmed; CI refused meanwhile")
	e.rerun(args, want)
}

// onAPI calls fn (in its own goroutine) when the servers have seen the
// n-th API request whose subject contains part; stop ends the watch.
func onAPI(t testing.TB, urls, part string, n int64, fn func()) (stop func()) {
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	var wg sync.WaitGroup
	nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, part) && seen.Add(1) == n {
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
		}
	})
	nc.Flush()
	return func() { nc.Close(); wg.Wait() }
}

var repartitionKills = []string{"CONSUMER.CREATE." + chaosStream, "STREAM.UPDATE." + chaosStream, "CONSUMER.LIST." + chaosStream,
	"CONSUMER.PAUSE." + chaosStream, "CONSUMER.DELETE." + chaosStream}

var recreateKills = []string{"CONSUMER.PAUSE." + chaosStream, "CONSUMER.DELETE." + chaosStream, "CONSUMER.CREATE." + chaosStream, "CONSUMER.UPDATE." + chaosStream}

// repartition changes the partition count in a mode; with the mapping in
// the account it takes the two runs and the operator's switch between.
func (e *chaosEnv) repartition(to int, mode string) {
	e.t.Helper()
	if e.cfg.mapping == planner.MappingStream {
		e.step(mode, e.args(to), 0, repartitionKills)
	} else {
		e.step(mode, e.args(to), commands.ExitIncomplete, repartitionKills)
		e.installMapping(to)
		e.step(e.deck(1, []string{"plain", "kill", "restart"})[0], e.args(to, "--mapping-switched"), 0, repartitionKills)
	}
	e.n = to
}

// recreate changes an immutable lane field with --recreate; a run killed
// half way is finished by a re-run without the flag when the killed one
// recorded the recreate (else, killed before it changed anything, the
// re-run needs the flag again).
func (e *chaosEnv) recreate(mode string) {
	e.t.Helper()
	e.stats.Recreates++
	if e.maxWaiting == 512 {
		e.maxWaiting = 128
	} else {
		e.maxWaiting = 512
	}
	args := e.args(e.n, "--recreate")
	e.note("recreate (max_waiting %d): %s", e.maxWaiting, mode)
	if mode != "kill" {
		e.step(mode, args, 0, nil)
		return
	}
	part := recreateKills[e.rng.IntN(len(recreateKills))]
	n := int64(1 + e.rng.IntN(3))
	e.stats.Applies++
	c := runChild(e.t, e.urls, part, n, args...)
	if !c.killed {
		if c.code != 0 {
			e.fatalf("recreate: exit %d\n%s", c.code, c.stderr)
		}
		return
	}
	e.stats.Kills++
	e.note("killed -9 at %s #%d", part, n)
	var plain ran
	for attempt := 0; attempt < 6; attempt++ {
		e.stats.Applies++
		if plain = runChild(e.t, e.urls, "", 0, e.args(e.n)...); !transient(plain.code) {
			break
		}
		e.note("plain re-run -> exit %d", plain.code)
		e.settle()
		time.Sleep(time.Second)
	}
	switch plain.code {
	case 0:
		e.stats.FlaglessFinish++
		e.note("a plain re-run finished the recreate")
	case commands.ExitRefused:
		e.note("killed before it recorded anything: re-run with --recreate")
		e.rerun(args, 0)
	default:
		e.fatalf("plain re-run after a killed recreate: exit %d\n%s\n%s", plain.code, plain.stdout, plain.stderr)
	}
}

// runChaos runs a whole chaos scenario and checks the outcome.
func runChaos(t testing.TB, cfg chaosConfig) (chaosStats, chaos.Counts) {
	e := newChaos(t, cfg)
	e.note("servers up")
	start := time.Now()
	_, js, err := chaos.Connect(e.urls)
	if err != nil {
		t.Fatal(err)
	}
	e.installMapping(cfg.counts[0])
	e.rerun(e.args(cfg.counts[0]), 0)
	e.n = cfg.counts[0]
	e.check = chaos.New(js, chaosStream, "chaos", "chaos.in.*", cfg.keys)
	defer e.check.Close()
	e.check.Work()
	e.check.Publish(cfg.keys * 3)
	stopPublishing := e.check.PublishInBackground(cfg.rate)

	// The plan: every count after the first is a repartition; recreates
	// and restarts come in between, at places the seed picks.
	type action struct {
		kind string
		to   int
	}
	var plan []action
	for _, n := range cfg.counts[1:] {
		plan = append(plan, action{"repartition", n})
	}
	for i := 0; i < cfg.recreates; i++ {
		plan = append(plan, action{kind: "recreate"})
	}
	for i := 0; i < cfg.restarts; i++ {
		plan = append(plan, action{kind: "restart"})
	}
	// Keep the repartitions in order; move the others around.
	ordered := plan[:len(cfg.counts)-1]
	extra := plan[len(cfg.counts)-1:]
	plan = append([]action(nil), ordered...)
	for _, a := range extra {
		i := e.rng.IntN(len(plan) + 1)
		plan = append(plan[:i], append([]action{a}, plan[i:]...)...)
	}
	if cfg.modes == nil {
		cfg.modes = chaosModes
	}
	modes := e.deck(len(ordered), cfg.modes)
	recreateModes := e.deck(cfg.recreates, []string{"plain", "kill", "kill"})
	for _, a := range plan {
		switch a.kind {
		case "repartition":
			mode := modes[0]
			modes = modes[1:]
			e.repartition(a.to, mode)
		case "recreate":
			mode := recreateModes[0]
			recreateModes = recreateModes[1:]
			e.recreate(mode)
		case "restart":
			e.note("server restart")
			e.restart()
			e.settle()
			e.rerun(e.args(e.n), 0)
		}
	}

	stopPublishing()
	code, out, errs := lanesRun(e.args(e.n)...)
	if code != 0 || !strings.Contains(out, "Nothing to do") {
		e.fatalf("the final apply must find nothing to do: exit %d\n%s\n%s", code, out, errs)
	}
	if !e.check.WaitProcessed(90 * time.Second) {
		e.fatalf("not every message was processed: %v (%+v)", e.check.Err(), e.check.Counts())
	}
	if err := e.check.Err(); err != nil {
		e.fatalf("per-key order broken: %v", err)
	}
	code, out, errs = lanesRun("inspect", "--stream", chaosStream, "-s", e.urls, "--fail-on", "severity>=warning")
	if code != 0 {
		var meta map[string]string
		if s, err := js.Stream(context.Background(), chaosStream); err == nil {
			meta = s.CachedInfo().Config.Metadata
		}
		e.fatalf("inspect after the chaos: exit %d\n%s\n%s\nstream metadata: %v", code, out, errs, meta)
	}
	counts := e.check.Counts()
	t.Logf("%s in %s: %+v; messages %+v", describe(cfg), time.Since(start).Round(time.Millisecond), e.stats, counts)
	t.Logf("steps:\n  %s", strings.Join(e.log, "\n  "))
	return e.stats, counts
}

func describe(cfg chaosConfig) string {
	where := "single server"
	if cfg.cluster {
		where = "3-node cluster"
	}
	return fmt.Sprintf("%s, mapping %s, counts %v, seed %d", where, cfg.mapping, cfg.counts, cfg.seed)
}

// isolate keeps the environment's NATS settings and natscli contexts out.
func isolate(tb testing.TB) {
	for _, v := range []string{"NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN"} {
		tb.Setenv(v, "")
		os.Unsetenv(v)
	}
	tb.Setenv("XDG_CONFIG_HOME", tb.TempDir())
}

// TestChaos is the short form: a fixed seed, every mode at least once.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	isolate(t)
	t.Run("single/stream", func(t *testing.T) {
		runChaos(t, chaosConfig{seed: 8, mapping: planner.MappingStream, counts: []int{8, 16, 12, 5, 8, 16, 8},
			recreates: 2, restarts: 1, rate: 200, keys: 40})
	})
	t.Run("cluster/account", func(t *testing.T) {
		runChaos(t, chaosConfig{seed: 3, cluster: true, mapping: planner.MappingAccount, counts: []int{4, 6, 4},
			modes: []string{"kill", "prompt"}, recreates: 1, restarts: 1, rate: 100, keys: 30})
	})
}

// BenchmarkChaos is the long form: longer walks, more keys and a higher
// publish rate, a new seed every iteration. It fails on any lost, replayed
// or skipped message, like the test; the figures are per run:
//
//	go test ./commands -run '^$' -bench Chaos -benchtime 5x
func BenchmarkChaos(b *testing.B) {
	isolate(b)
	for _, c := range []struct {
		name string
		cfg  chaosConfig
	}{
		{"single/stream", chaosConfig{mapping: planner.MappingStream, counts: []int{8, 16, 12, 5, 8, 32, 24, 8, 16, 12, 8},
			recreates: 4, restarts: 2, rate: 500, keys: 200}},
		{"cluster/account", chaosConfig{cluster: true, mapping: planner.MappingAccount, counts: []int{4, 8, 6, 4, 8, 4},
			recreates: 2, restarts: 2, rate: 200, keys: 100}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var st chaosStats
			var msgs chaos.Counts
			for i := 0; i < b.N; i++ {
				cfg := c.cfg
				cfg.seed = uint64(i + 1)
				s, m := runChaos(b, cfg)
				st.Applies += s.Applies
				st.Kills += s.Kills
				st.Restarts += s.Restarts
				st.LockRefusals += s.LockRefusals
				msgs.Published += m.Published
				msgs.Repeated += m.Repeated
				msgs.Lost += m.Lost
				msgs.Replayed += m.Replayed
				msgs.Skipped += m.Skipped
			}
			n := float64(b.N)
			b.ReportMetric(float64(msgs.Published)/n, "msgs/run")
			b.ReportMetric(float64(st.Applies)/n, "applies/run")
			b.ReportMetric(float64(st.Kills)/n, "kills/run")
			b.ReportMetric(float64(st.Restarts)/n, "restarts/run")
			b.ReportMetric(float64(st.LockRefusals)/n, "lock-refusals/run")
			b.ReportMetric(float64(msgs.Repeated)/n, "repeats/run")
			b.ReportMetric(float64(msgs.Lost+msgs.Replayed+msgs.Skipped), "violations")
		})
	}
}
