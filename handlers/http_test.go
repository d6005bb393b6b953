package handlers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/lanes-dev/lanes/work"
)

// TestHTTPBodyCutOff: a 200 whose body is cut off (the connection closes
// before Content-Length bytes came) is not a success: the handler fails,
// so the message is retried; an answer that arrives whole succeeds.
func TestHTTPBodyCutOff(t *testing.T) {
	var whole atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if whole.Load() {
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
	h, err := NewHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	m := &work.Msg{Stream: "ORDERS", Lane: "orders-n1-00", Seq: 1, Attempt: 1, Data: []byte("m")}
	err = h.Handle(context.Background(), m)
	var term *work.TermError
	var outage *work.OutageError
	if err == nil || errors.As(err, &term) || errors.As(err, &outage) {
		t.Fatalf("a cut-off answer: %v, want a failure to retry (not success, not a term, not an outage)", err)
	}
	whole.Store(true)
	if err := h.Handle(context.Background(), m); err != nil {
		t.Fatalf("a whole answer: %v", err)
	}
}
