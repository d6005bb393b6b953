package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// HTTP contract of --http: the request headers carry the message's
// metadata, and the answer decides what happens to it.
const (
	HTTPHeaderPrefix = "Lanes-Header-" // a message header Trace-Id arrives as Lanes-Header-Trace-Id
	HTTPTermHeader   = "Lanes-Term"    // in any answer: terminate the message (its value is the reason)
	HTTPTermStatus   = http.StatusUnprocessableEntity
)

// HTTP POSTs each message's payload to URL with its metadata as
// headers (Lanes-Stream, Lanes-Lane, Lanes-Partition, Lanes-Subject,
// Lanes-Key, Lanes-Seq, Lanes-Attempt, Lanes-Published, Lanes-Instance,
// and Lanes-Header-<Name> per message header). A 2xx answer whose body
// arrives whole acks; 422 or a Lanes-Term header terminates; anything
// else, a transport error or the end of the context (max process time,
// stop: the request is cancelled) retries, after Retry-After when the
// answer has one. A service that cannot be reached (its name does not
// resolve, its connection is refused) is an Outage: the message waits.
type HTTP struct {
	URL    string
	Client *http.Client // default: keeps a connection per lane alive
}

// NewHTTP checks the URL and prepares a client that keeps enough
// idle connections for one request per lane at a time.
func NewHTTP(url string) (*HTTP, error) {
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return nil, fmt.Errorf("%s is not an http:// or https:// URL", planner.Quote(url, 64))
	}
	if host := req.URL.Hostname(); len(host) > 253 || slices.ContainsFunc(strings.Split(host, "."), func(l string) bool { return len(l) > 63 }) {
		return nil, fmt.Errorf("%s: the host name is longer than a host name can be", planner.Quote(url, 64))
	}
	if p := req.URL.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s: port %s is not a port (1-65535)", planner.Quote(url, 64), p)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4096
	return &HTTP{URL: url, Client: &http.Client{Transport: tr}}, nil
}

// Handle POSTs one message.
func (h *HTTP) Handle(ctx context.Context, m *work.Msg) error {
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
		if ctx.Err() == nil && unreachable(err) {
			return work.Outage(err) // the request never reached the service
		}
		return err
	}
	defer resp.Body.Close()
	// The answer counts once it is whole: a body cut off (shorter than
	// its Content-Length, a connection reset, a chunked body without its
	// end) is a failure, whatever the status said.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		return fmt.Errorf("%s, but the answer's body was cut off: %w", resp.Status, err)
	}
	text := strings.TrimSpace(string(body))
	if reason := resp.Header.Get(HTTPTermHeader); reason != "" || resp.StatusCode == HTTPTermStatus {
		if reason == "" {
			reason = text
		}
		return work.Term(fmt.Errorf("%s: %s", resp.Status, planner.OneLine(reason, 1024)))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	err = fmt.Errorf("%s", resp.Status)
	if text != "" {
		err = fmt.Errorf("%s: %s", resp.Status, planner.OneLine(text, 1024))
	}
	if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		return work.RetryAfter(d, err)
	}
	return err
}

// unreachable: the request could not be sent at all, the service's
// address does not resolve or its connection failed (refused, no route,
// timed out): an outage, not the message's failure.
func unreachable(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
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
