package work_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/render"
	"github.com/lanes-dev/lanes/work"
)

// TestInstancesWantedFollowsBacklog: lanes_work_instances_wanted, as a
// worker's --metrics and inspect -o prometheus give it, is 1 while the
// lanes are idle, rises with the lanes that have a backlog (2 of 4, then
// 4 of 4), and falls back to 1 once they are drained; both outputs say the
// same at each step, with the same help. On a key-parallel design a busy
// lane still counts once: its keys run on the one instance that holds it.
func TestInstancesWantedFollowsBacklog(t *testing.T) {
	for _, k := range []int{1, 4} {
		t.Run(fmt.Sprintf("keys_in_flight=%d", k), func(t *testing.T) {
			s := natstest.Start(t)
			_, js := natstest.Connect(t, s.URL())
			p := testutil.Plan(t, "orders", 4, func(d *planner.Design) { d.Lane.KeysInFlight = k })
			natstest.CreateLanes(t, js, p)

			gate := make(chan struct{})
			m := work.NewMetrics()
			w, err := work.New(js, work.Config{Stream: p.Stream.Name, Design: "orders", Instance: "one", Metrics: m,
				Relist: 100 * time.Millisecond}, // the figure follows the listing: make it quick
				work.HandlerFunc(func(ctx context.Context, _ *work.Msg) error {
					select {
					case <-gate:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			opened := false
			t.Cleanup(func() {
				if !opened {
					close(gate)
				}
				cancel()
				<-done
			})
			scrape := httptest.NewServer(m.Handler())
			t.Cleanup(scrape.Close)
			conn := connect.Around(js, 10*time.Second)

			both := func(want int) {
				t.Helper()
				var workerSays, inspectSays string
				testutil.WaitFor(t, fmt.Sprintf("instances wanted %d in both outputs", want), 30*time.Second, func() bool {
					workerSays = wantedSeries(t, get(t, scrape.URL))
					inspectSays = wantedSeries(t, inspect(t, conn, p.Stream.Name))
					return workerSays == inspectSays && strings.HasSuffix(workerSays, fmt.Sprintf("} %d", want))
				})
			}
			both(1) // idle: the minimum
			var subjects []string
			for part := range 2 {
				subjects = append(subjects, natstest.SubjectsFor(t, p, part, 3)...)
			}
			natstest.Publish(t, js, subjects...)
			both(2)
			subjects = nil
			for part := 2; part < 4; part++ {
				subjects = append(subjects, natstest.SubjectsFor(t, p, part, 3)...)
			}
			natstest.Publish(t, js, subjects...)
			both(4)
			close(gate)
			opened = true
			both(1) // drained
		})
	}
}

// get reads a URL's body.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inspect is lanes inspect -o prometheus on stream.
func inspect(t *testing.T, conn *connect.Conn, stream string) string {
	t.Helper()
	r, err := health.Inspect(context.Background(), conn, health.Options{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := render.InspectPrometheus(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var wantedLine = regexp.MustCompile(`(?m)^lanes_work_instances_wanted\{([^}]*)\} (\S+)$`)

// wantedSeries is the exposition's lanes_work_instances_wanted, in one
// form whatever the order of its labels: its help, then
// {design=...,stream=...} value; "" when it has none.
func wantedSeries(t *testing.T, text string) string {
	t.Helper()
	ms := wantedLine.FindAllStringSubmatch(text, -1)
	if len(ms) != 1 {
		return ""
	}
	labels := strings.Split(ms[0][1], ",")
	if len(labels) != 2 {
		t.Fatalf("lanes_work_instances_wanted has labels %s: want stream and design", ms[0][1])
	}
	if strings.HasPrefix(labels[0], "stream=") {
		labels[0], labels[1] = labels[1], labels[0]
	}
	v, err := strconv.ParseFloat(ms[0][2], 64)
	if err != nil {
		t.Fatal(err)
	}
	help := regexp.MustCompile(`(?m)^# HELP lanes_work_instances_wanted (.*)$`).FindStringSubmatch(text)
	if help == nil {
		t.Fatalf("lanes_work_instances_wanted has no help:\n%s", text)
	}
	return fmt.Sprintf("%s {%s} %g", help[1], strings.Join(labels, ","), v)
}
