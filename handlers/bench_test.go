package handlers

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/worktest"
)

// BenchmarkHandlers: the per-message cost of --exec and --http on one
// lane, next to what a bare fork of sh -c true and a bare POST cost.
//
//	go test ./handlers -run '^$' -bench Handlers -benchtime 3x
func BenchmarkHandlers(b *testing.B) {
	s := natstest.Start(b)
	_, js := natstest.Connect(b, s.URL())
	natstest.KeepAccountStreams(b, js)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	hh, _ := NewHTTP(srv.URL)
	eh := &Exec{Command: "true"}
	const execN, httpN = 400, 3000
	var execMsg, forkMsg, httpMsg, postMsg []float64
	i := 0
	for b.Loop() {
		i++
		p := worktest.Backlog(b, js, fmt.Sprintf("exec%d", i), 1, execN)
		execMsg = append(execMsg, 1e6/worktest.Drain(b, s.URL(), p, execN, eh))
		worktest.DropStream(b, js, p.Stream.Name)
		start := time.Now()
		for range execN {
			if err := exec.Command("sh", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		}
		forkMsg = append(forkMsg, float64(time.Since(start).Microseconds())/execN)

		p = worktest.Backlog(b, js, fmt.Sprintf("http%d", i), 1, httpN)
		httpMsg = append(httpMsg, 1e6/worktest.Drain(b, s.URL(), p, httpN, hh))
		worktest.DropStream(b, js, p.Stream.Name)
		start = time.Now()
		for range httpN {
			resp, err := hh.Client.Post(srv.URL, "application/octet-stream", nil)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
		postMsg = append(postMsg, float64(time.Since(start).Microseconds())/httpN)
	}
	b.ReportMetric(worktest.Median(execMsg), "exec-µs/msg")
	b.ReportMetric(worktest.Median(forkMsg), "fork-µs")
	b.ReportMetric(worktest.Median(httpMsg), "http-µs/msg")
	b.ReportMetric(worktest.Median(postMsg), "post-µs")
}
