// Package jsapi is how lanes talks to the JetStream API: one request path
// (the connection's deadline on every request, and a request that fails at
// once when the server reports a permissions violation), one error type for
// the API's answers (Error, with IsStreamNotFound and friends), one
// consumer lister that keeps what a cluster could not report, and a typed
// method for each request lanes makes (streams, consumers, message
// lookups).
//
// No other package builds an API subject (docs/ARCHITECTURE.md names the
// exceptions left). The jetstream client package remains for what it does
// well (KV buckets, publishing, pulling), and its API errors are read
// through As.
package jsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/connect"
)

// Client sends JetStream API requests on one connection, as raw JSON, so
// callers decide exactly which fields they send. It counts the requests,
// and separately those that change something and those of them the server
// refused.
type Client struct {
	conn     *connect.Conn
	requests atomic.Int64
	writes   atomic.Int64
	refused  atomic.Int64
}

// New is a client on conn.
func New(conn *connect.Conn) *Client { return &Client{conn: conn} }

// Conn is the connection the client uses.
func (c *Client) Conn() *connect.Conn { return c.conn }

// Requests is how many requests the client sent.
func (c *Client) Requests() int64 { return c.requests.Load() }

// Writes is how many of them were sent with Write.
func (c *Client) Writes() int64 { return c.writes.Load() }

// RefusedWrites is how many writes the server answered with an error: they
// changed nothing. (A write that got no answer may have.)
func (c *Client) RefusedWrites() int64 { return c.refused.Load() }

// Read sends a request that changes nothing: api is the subject after the
// API prefix (e.g. "STREAM.INFO.ORDERS"), body is marshalled to JSON (nil
// sends an empty request), and the answer is decoded into out (if not
// nil). An error answer is an *Error; a JetStream cluster without a leader
// is a connect error of kind KindUnavailable wrapping it; anything else
// is classified by connect (timeout, lost connection, permission).
func (c *Client) Read(ctx context.Context, api string, body, out any) error {
	return c.call(ctx, api, body, out)
}

// Write is Read for a request that changes the server: it is counted,
// and so is the server's refusal.
func (c *Client) Write(ctx context.Context, api string, body, out any) error {
	c.writes.Add(1)
	err := c.call(ctx, api, body, out)
	if _, answered := As(err); answered {
		c.refused.Add(1)
	}
	return err
}

func (c *Client) call(ctx context.Context, api string, body, out any) error {
	data, err := marshal(body)
	if err != nil {
		return err
	}
	answer, err := c.request(ctx, api, data)
	if err != nil {
		return err
	}
	return c.decode(api, answer.Data, out)
}

// Guard is the connection's permission guard (connect.Conn.Guard) over a
// whole operation: requests under the returned context need no guard of
// their own, which spares 1,024 head lookups as many registrations.
func (c *Client) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, release := c.conn.Guard(ctx)
	return context.WithValue(ctx, guardKey{}, c.conn), release
}

type guardKey struct{}

// request sends one request under the connection's deadline and the
// permission guard, and returns the answer. A context already guarded
// (Guard) or with a nearer deadline is used as it is.
func (c *Client) request(ctx context.Context, api string, data []byte) (*nats.Msg, error) {
	c.requests.Add(1)
	if ctx.Value(guardKey{}) != c.conn {
		var release context.CancelFunc
		ctx, release = c.conn.Guard(ctx)
		defer release()
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.conn.Timeout {
		var cancel context.CancelFunc
		ctx, cancel = c.conn.Ctx(ctx)
		defer cancel()
	}
	msg, err := c.conn.NC.RequestWithContext(ctx, c.conn.APIPrefix+api, data)
	if err != nil {
		return nil, c.conn.Classify(ctx, err)
	}
	return msg, nil
}

func marshal(body any) ([]byte, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case []byte:
		return b, nil
	}
	return json.Marshal(body)
}

// errorKey is looked for before an answer is decoded for its error: most
// answers have none, and a byte search is much cheaper than a second
// decoding of a large answer (a page of 256 consumer infos).
var errorKey = []byte(`"error"`)

func (c *Client) decode(api string, data []byte, out any) error {
	if bytes.Contains(data, errorKey) {
		var answer struct {
			Error *Error `json:"error"`
		}
		if err := json.Unmarshal(data, &answer); err != nil {
			return fmt.Errorf("unreadable answer to %s: %w", api, err)
		}
		if answer.Error != nil {
			return c.apiError(answer.Error)
		}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("unreadable answer to %s: %w", api, err)
	}
	return nil
}

// apiError is an error answer; a cluster without a leader is said in
// words (connect.NoLeader), still carrying the answer.
func (c *Client) apiError(e *Error) error {
	if e.ErrCode == CodeClusterNotAvailable {
		return connect.NoLeader(c.conn.Server, e)
	}
	return e
}
