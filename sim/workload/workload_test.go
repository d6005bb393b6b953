package workload_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sim/workload"
)

func subject(key string) (string, error) { return "msgs.received_from." + key, nil }

func TestParseProcess(t *testing.T) {
	good := map[string]workload.Process{
		"10ms":                {Kind: "fixed", Mean: 10 * time.Millisecond},
		"exp:2s":              {Kind: "exp", Mean: 2 * time.Second},
		"lognormal:5ms:200ms": {Kind: "lognormal", P50: 5 * time.Millisecond, P99: 200 * time.Millisecond},
	}
	for in, want := range good {
		got, err := workload.ParseProcess(in)
		if err != nil || got != want {
			t.Errorf("ParseProcess(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%q prints as %q", in, got.String())
		}
	}
	for _, in := range []string{"", "0s", "-1ms", "ten", "exp:", "exp:0", "uniform:1ms", "lognormal:5ms", "lognormal:9ms:1ms", "lognormal:x:1s"} {
		_, err := workload.ParseProcess(in)
		if err == nil || !strings.Contains(err.Error(), "--process-time") || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseProcess(%q): error %v, want one naming --process-time and the value", in, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k, err := workload.ParseKeys("uniform:12", subject)
	if err != nil || len(k.Names) != 12 || k.Names[0] != "key-01" || k.Subjects[11] != "msgs.received_from.key-12" || k.Weights[5] != 1 {
		t.Fatalf("uniform:12 = %+v, %v", k, err)
	}
	z, err := workload.ParseKeys("zipf:100:1.2", subject)
	if err != nil || len(z.Names) != 100 || !(z.Weights[0] > z.Weights[1] && z.Weights[1] > z.Weights[99]) {
		t.Fatalf("zipf:100:1.2 weights not decreasing: %v, %v", z.Weights[:3], err)
	}
	if r := z.Weights[0] / z.Weights[1]; math.Abs(r-math.Pow(2, 1.2)) > 1e-9 {
		t.Fatalf("zipf rank 1 / rank 2 = %.4f, want 2^1.2", r)
	}
	for _, in := range []string{"", "uniform", "uniform:0", "uniform:x", "uniform:20000000", "zipf:10", "zipf:10:0", "zipf:10:abc", "zipf:10:11", "file", "normal:3"} {
		_, err := workload.ParseKeys(in, subject)
		if err == nil || !strings.Contains(err.Error(), "--keys") || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseKeys(%q): error %v, want one naming --keys and the value", in, err)
		}
	}
	if _, err := workload.ParseKeys("uniform:3", func(string) (string, error) { return "", fmt.Errorf("no") }); err == nil {
		t.Error("a subject error was swallowed")
	}
}

func TestKeysAddSumsRepeatedSubjects(t *testing.T) {
	k, _ := workload.NamedKeys([]string{"alice", "bob"}, subject)
	k.Add("alice", "msgs.received_from.alice", 4)
	k.Add("carol", "msgs.received_from.carol", 2)
	if !reflect.DeepEqual(k.Names, []string{"alice", "bob", "carol"}) || !reflect.DeepEqual(k.Weights, []float64{5, 1, 2}) {
		t.Fatalf("keys %v weights %v", k.Names, k.Weights)
	}
}

func spec(seed uint64) workload.Spec {
	k, _ := workload.ParseKeys("zipf:50:1", subject)
	return workload.Spec{Keys: k, Messages: 20_000, Rate: 1000, Process: workload.Process{Kind: "exp", Mean: time.Millisecond}, Crash: 0.1, Seed: seed}
}

func TestGenerateIsDeterministicAndFollowsWeights(t *testing.T) {
	a, err := workload.Generate(spec(7))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := workload.Generate(spec(7))
	if !reflect.DeepEqual(a.Messages, b.Messages) {
		t.Fatal("same seed, different messages")
	}
	if c, _ := workload.Generate(spec(8)); reflect.DeepEqual(a.Messages, c.Messages) {
		t.Fatal("different seeds, same messages")
	}
	counts := make([]float64, 50)
	for _, m := range a.Messages {
		counts[m.Key]++
	}
	total := 0.0
	for _, w := range a.Spec.Keys.Weights {
		total += w
	}
	if share, want := counts[0]/20_000, a.Spec.Keys.Weights[0]/total; math.Abs(share-want) > 0.02 {
		t.Fatalf("top key share %.3f, want about %.3f", share, want)
	}
	// Evenly spaced arrivals at 1000/s.
	if a.Messages[0].At != 0 || a.Messages[1000].At != time.Second || a.Messages[19_999].At != 19_999*time.Millisecond {
		t.Fatalf("arrivals %v %v %v", a.Messages[0].At, a.Messages[1000].At, a.Messages[19_999].At)
	}
}

func TestPrevAndLastOfKey(t *testing.T) {
	k, _ := workload.NamedKeys([]string{"a", "b", "c"}, subject)
	w, err := workload.Sequence(workload.Spec{Keys: k, Process: workload.Process{Kind: "fixed", Mean: time.Millisecond}}, []int{0, 1, 0, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	var prev []int
	for i := range w.Messages {
		prev = append(prev, w.Prev(i))
	}
	if !slices.Equal(prev, []int{-1, -1, 0, 2, 1}) || w.LastOfKey(0) != 3 || w.LastOfKey(1) != 4 || w.LastOfKey(2) != -1 {
		t.Fatalf("prev %v last %d %d %d", prev, w.LastOfKey(0), w.LastOfKey(1), w.LastOfKey(2))
	}
	if !w.IsLastOfKey(3) || w.IsLastOfKey(2) || w.Subject(4) != "msgs.received_from.b" {
		t.Fatal("IsLastOfKey or Subject wrong")
	}
	if _, err := workload.Sequence(w.Spec, []int{0, 3}); err == nil {
		t.Fatal("key index 3 of 3 accepted")
	}
}

// Attempt is a pure function of (seed, message, attempt): the model and the
// live run get the same work time and crash, in any order of calls.
func TestAttemptIsAPureFunction(t *testing.T) {
	w, _ := workload.Generate(spec(3))
	type att struct {
		d time.Duration
		c bool
	}
	first := map[[2]int]att{}
	for i := 0; i < 500; i++ {
		for a := 1; a <= 3; a++ {
			d, c := w.Attempt(i, a)
			first[[2]int{i, a}] = att{d, c}
		}
	}
	crashes := 0
	for i := 499; i >= 0; i-- {
		for a := 3; a >= 1; a-- {
			d, c := w.Attempt(i, a)
			if (att{d, c}) != first[[2]int{i, a}] {
				t.Fatalf("attempt %d of message %d changed", a, i)
			}
			if c {
				crashes++
				if d > 50*time.Millisecond {
					t.Fatalf("crash after %v, beyond any plausible work time", d)
				}
			}
		}
	}
	if crashes < 100 || crashes > 200 {
		t.Fatalf("%d crashes in 1500 attempts at p=0.1", crashes)
	}
}

func TestDistributions(t *testing.T) {
	k, _ := workload.NamedKeys([]string{"a"}, subject)
	draws := func(p workload.Process) []time.Duration {
		w, err := workload.Generate(workload.Spec{Keys: k, Messages: 20_000, Process: p, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]time.Duration, len(w.Messages))
		for i := range out {
			out[i], _ = w.Attempt(i, 1)
		}
		slices.Sort(out)
		return out
	}
	q := func(d []time.Duration, f float64) float64 { return float64(d[int(f*float64(len(d)))]) / 1e6 }

	ln := workload.Process{Kind: "lognormal", P50: 10 * time.Millisecond, P99: 100 * time.Millisecond}
	d := draws(ln)
	if p50, p99 := q(d, 0.5), q(d, 0.99); math.Abs(p50-10) > 0.5 || math.Abs(p99-100) > 10 {
		t.Fatalf("lognormal:10ms:100ms drew p50 %.1fms p99 %.1fms", p50, p99)
	}
	if ln.Median() != 10*time.Millisecond || ln.Average() <= ln.Median() {
		t.Fatalf("lognormal median %v average %v", ln.Median(), ln.Average())
	}
	ex := workload.Process{Kind: "exp", Mean: 10 * time.Millisecond}
	d = draws(ex)
	sum := 0.0
	for _, v := range d {
		sum += float64(v)
	}
	if mean := sum / float64(len(d)) / 1e6; math.Abs(mean-10) > 0.5 || math.Abs(q(d, 0.5)-float64(ex.Median())/1e6) > 0.5 {
		t.Fatalf("exp:10ms drew mean %.2fms median %.2fms", mean, q(d, 0.5))
	}
	if d := draws(workload.Process{Kind: "fixed", Mean: 3 * time.Millisecond}); d[0] != d[len(d)-1] {
		t.Fatal("fixed processing time varies")
	}
}

func TestGenerateRejects(t *testing.T) {
	good := spec(1)
	bad := map[string]func(*workload.Spec){
		"--messages":              func(s *workload.Spec) { s.Messages = 0 },
		"--rate":                  func(s *workload.Spec) { s.Rate = -1 },
		"--crash":                 func(s *workload.Spec) { s.Crash = 1 },
		"no keys":                 func(s *workload.Spec) { s.Keys = workload.Keys{} },
		"weight 0":                func(s *workload.Spec) { s.Keys.Weights = make([]float64, len(s.Keys.Weights)) },
		"weight":                  func(s *workload.Spec) { s.Keys.Weights[0] = math.NaN() },
		"failing key unknown":     func(s *workload.Spec) { s.Failing = workload.Failing{Key: "nobody", Attempts: 1} },
		"failing key no attempts": func(s *workload.Spec) { s.Failing = workload.Failing{Key: "key-01", Attempts: 0} },
	}
	for name, f := range bad {
		s := good
		s.Keys.Weights = slices.Clone(good.Keys.Weights)
		f(&s)
		if _, err := workload.Generate(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A failing key's first message fails its first N attempts, each after
// its whole work time; nothing else changes, so a workload without a
// failing key decides every attempt as before.
func TestFailingKey(t *testing.T) {
	s := spec(2)
	s.Crash = 0
	plain, err := workload.Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Failing = workload.Failing{Key: "key-07", Attempts: 2}
	w, err := workload.Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.IndexFunc(w.Messages, func(m workload.Message) bool { return s.Keys.Names[m.Key] == "key-07" })
	if first < 0 || w.Prev(first) != -1 {
		t.Fatalf("key-07's first message is %d", first)
	}
	for i := range w.Messages[:2000] {
		for a := 1; a <= 3; a++ {
			d, crash := w.Attempt(i, a)
			pd, _ := plain.Attempt(i, a)
			if want := i == first && a <= 2; crash != want || d != pd {
				t.Fatalf("message %d attempt %d: crash %v after %s; want crash %v after the whole %s", i, a, crash, d, want, pd)
			}
		}
	}
	s.Keys = workload.Keys{}
	s.Keys.Add("a", "s.a", 1)
	s.Keys.Add("b", "s.b", 0)
	s.Failing = workload.Failing{Key: "b", Attempts: 1}
	if _, err := workload.Generate(s); err == nil || !strings.Contains(err.Error(), "no message of the workload has that key") {
		t.Fatalf("a failing key without messages: %v", err)
	}
}
