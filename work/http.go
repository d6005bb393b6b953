package work

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HTTP contract of --http: the request headers carry the message's
// metadata, and the answer decides what happens to it.
const (
	HTTPHeaderPrefix = "Lanes-Header-" // a message header Trace-Id arrives as Lanes-Header-Trace-Id
	HTTPTermHeader   = "Lanes-Term"    // in any answer: terminate the message (its value is the reason)
	HTTPTermStatus   = http.StatusUnprocessableEntity
)

// HTTPHandler POSTs each message's payload to URL with its metadata as
// headers (Lanes-Stream, Lanes-Lane, Lanes-Partition, Lanes-Subject,
// Lanes-Key, Lanes-Seq, Lanes-Attempt, Lanes-Published, Lanes-Instance,
// and Lanes-Header-<Name> per message header). A 2xx answer acks; 422 or a
// Lanes-Term header terminates; anything else, a transport error or the
// end of the context (max process time, stop: the request is cancelled)
// retries, after Retry-After when the answer has one.
type HTTPHandler struct {
	URL    string
	Client *http.Client // default: keeps a connection per lane alive
}

// NewHTTPHandler checks the URL and prepares a client that keeps enough
// idle connections for one request per lane at a time.
func NewHTTPHandler(url string) (*HTTPHandler, error) {
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// URL", url)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4096
	return &HTTPHandler{URL: url, Client: &http.Client{Transport: tr}}, nil
}

// Handle POSTs one message.
func (h *HTTPHandler) Handle(ctx context.Context, m *Msg) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(m.Data))
	if err != nil {
		return err
	}
	hd := req.Header
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Lanes-Stream", m.Stream)
	hd.Set("Lanes-Lane", m.Lane)
	hd.Set("Lanes-Partition", strconv.Itoa(m.Partition))
	hd.Set("Lanes-Subject", m.Subject)
	hd.Set("Lanes-Key", m.Key)
	hd.Set("Lanes-Seq", strconv.FormatUint(m.Seq, 10))
	hd.Set("Lanes-Attempt", strconv.Itoa(m.Attempt))
	hd.Set("Lanes-Published", m.Published.UTC().Format(time.RFC3339Nano))
	hd.Set("Lanes-Instance", m.Instance)
	for name, values := range m.Header {
		for _, v := range values {
			hd.Add(HTTPHeaderPrefix+name, v)
		}
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // so the connection is reused
	text := strings.TrimSpace(string(body))
	if reason := resp.Header.Get(HTTPTermHeader); reason != "" || resp.StatusCode == HTTPTermStatus {
		if reason == "" {
			reason = text
		}
		return Term(fmt.Errorf("%s: %s", resp.Status, oneLine(reason, 1024)))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("%s", resp.Status)
	if text != "" {
		err = fmt.Errorf("%s: %s", resp.Status, oneLine(text, 1024))
	}
	if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		return RetryAfter(d, err)
	}
	return err
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}
