package work

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// TestHTTPBodyCutOff: a 200 whose body is cut off (the connection closes
// before Content-Length bytes came) is not a success: the message is not
// acked but retried, and acked once an answer arrives whole.
func TestHTTPBodyCutOff(t *testing.T) {
	s, _, js, p := setup(t, "orders", 1, func(d *planner.Design) {
		d.Lane.BackOff = []planner.Duration{planner.Duration(100 * time.Millisecond)}
	})
	natstest.Publish(t, js, natstest.SubjectsFor(t, p, 0, 1)...)
	var mu sync.Mutex
	var attempts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		attempts = append(attempts, r.Header.Get("Lanes-Attempt"))
		n := len(attempts)
		mu.Unlock()
		if n > 1 {
			w.Write([]byte("done"))
			return
		}
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(100) + "\r\n\r\nonly the first bytes")
		buf.Flush()
		conn.Close()
	}))
	defer srv.Close()
	h, err := NewHTTPHandler(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, s.URL(), Config{Stream: p.Stream.Name, Design: p.Design.Name, Instance: "a"}, h)
	waitFor(t, "the message processed", 10*time.Second, func() bool { return w.w.Stats().Processed == 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[1] != "2" {
		t.Errorf("attempts %v, want 1 then 2: the cut-off answer was taken for a success", attempts)
	}
	if st := w.w.Stats(); st.Failed != 1 {
		t.Errorf("stats %+v, want 1 failure", st)
	}
}
