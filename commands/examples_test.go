package commands_test

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// TestExamplesAreClean: every shipped design, applied on the setup it is
// written for (a single nats-server, or a 3-node cluster with the account
// mapping installed), plans without an error, applies, takes its keys'
// messages, and passes inspect --fail-on 'severity>=warning'.
func TestExamplesAreClean(t *testing.T) {
	cases := []struct {
		design, keys string
		cluster      bool
	}{
		{"../examples/seed/lanes.yaml", "../examples/seed/keys.txt", false},
		{"../examples/device-events/lanes.yaml", "../examples/device-events/keys.txt", false},
		{"../examples/device-events-cluster/lanes.yaml", "../examples/device-events/keys.txt", true},
	}
	for _, tc := range cases {
		t.Run(strings.TrimPrefix(tc.design, "../examples/"), func(t *testing.T) {
			if tc.cluster && testing.Short() {
				t.Skip("-short: a 3-node cluster")
			}
			cleanEnv(t)
			data, err := os.ReadFile(tc.design)
			if err != nil {
				t.Fatal(err)
			}
			d, err := planner.ParseDesign(data, tc.design)
			if err != nil {
				t.Fatal(err)
			}
			p := testutil.PlanDesign(t, d)
			var url string
			if tc.cluster {
				c := natstest.StartCluster(t, 3)
				for _, s := range c.Servers {
					if err := s.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
						t.Fatal(err)
					}
				}
				url = c.URLs()
			} else {
				url = natstest.Start(t).URL()
			}
			if code, out, errs := lanes(t, "apply", "-f", tc.design, "-s", url, "--yes"); code != 0 {
				t.Fatalf("apply: exit %d\n%s%s", code, out, errs)
			}
			_, js := natstest.Connect(t, url)
			natstest.Publish(t, js, exampleSubjects(t, tc.keys, p)...)
			code, out, errs := lanes(t, "inspect", "-f", tc.design, "-s", url, "--fail-on", "severity>=warning")
			if code != 0 {
				t.Fatalf("inspect --fail-on severity>=warning: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

// exampleSubjects are the keys file's subjects (bare keys filled into the
// design's pattern), once each.
func exampleSubjects(t *testing.T, path string, p *planner.Plan) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		subj := fields[0]
		if !strings.Contains(subj, ".") {
			subj = strings.Replace(p.Design.Subject, "*", subj, 1)
		}
		out = append(out, subj)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no keys", path)
	}
	return out
}
