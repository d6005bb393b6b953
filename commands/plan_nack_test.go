package commands

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The seed as NACK resources, as a user gets them. render's tests check
// every object against NACK's CRDs.
func TestPlanNackGolden(t *testing.T) {
	stdout, stderr, code := run(t, "", "plan", "-f", seedFile, "-o", "nack")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "plan/seed.nack", stdout)
	dec := yaml.NewDecoder(strings.NewReader(stdout))
	n := 0
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err != io.EOF {
				t.Fatalf("document %d: %v", n, err)
			}
			break
		}
		n++
	}
	if n != 9 {
		t.Fatalf("%d documents, want the stream and 8 lanes", n)
	}
}

// A design NACK cannot express (pinned, key-parallel lanes), and -o nack
// with --key: exit 2, one line naming the field and the way out, nothing
// on stdout, nothing emitted.
func TestPlanNackRefused(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"pinned", []string{"plan", "-f", seedFile, "--pinned", "-o", "nack"},
			[]string{`--pinned: lane.pinned "true": -o nack cannot declare pinned lanes`, "NACK v0.16.2", "no priority groups", "lanes apply"}},
		{"key-parallel", []string{"plan", "-f", seedFile, "--keys-in-flight", "8", "-o", "nack"},
			[]string{`--keys-in-flight: lane.keys_in_flight "8": -o nack cannot declare key-parallel lanes`, "NACK v0.16.2", "no priority groups", "lanes apply"}},
		{"pinned example", []string{"plan", "-f", deviceFile, "-o", "nack"},
			[]string{`lanes.yaml:23: lane.pinned "true"`, "NACK v0.16.2", "lanes apply"}},
		{"key", []string{"plan", "-f", seedFile, "--key", "msgs.received_from.bob", "-o", "nack"},
			[]string{"--key prints table, json or yaml, not nack"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			emit := filepath.Join(dir, tc.name)
			stdout, stderr, code := run(t, "", append(tc.args, "--emit-dir", emit)...)
			if code != ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, ExitUsage, stderr)
			}
			if stdout != "" {
				t.Fatalf("stdout must stay empty, got %q", stdout)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1] // a design warning may come first
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("stderr %q: want %q", last, w)
				}
			}
			if _, err := os.Stat(emit); err == nil {
				t.Error("--emit-dir was written although the output was refused")
			}
		})
	}
}

func TestPlanHelpNack(t *testing.T) {
	stdout, _, code := run(t, "", "plan", "--help")
	if code != 0 || !strings.Contains(stdout, "-o table|json|yaml|conf|nsc|nack") || !strings.Contains(stdout, "lanes plan -f lanes.yaml -o nack") ||
		!strings.Contains(stdout, "table, json, yaml, conf, nsc, nack") {
		t.Fatalf("plan --help does not offer -o nack:\n%s", stdout)
	}
}
