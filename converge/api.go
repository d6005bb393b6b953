package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/lanelist"
)

// JetStream API error codes apply reacts to.
const (
	errCodeConsumerNotFound = 10014
	errCodeStreamNotFound   = lanelist.ErrCodeStreamNotFound
)

// api sends JetStream API requests as raw JSON, one deadline each, so
// apply controls exactly which fields it sends and how many requests are
// in flight. It counts the requests that change something.
type api struct {
	conn   *connect.Conn
	writes atomic.Int64
}

// read sends a request that changes nothing.
func (a *api) read(ctx context.Context, subject string, body, out any) error {
	return a.call(ctx, subject, body, out)
}

// write sends a request that changes the server, and counts it.
func (a *api) write(ctx context.Context, subject string, body, out any) error {
	a.writes.Add(1)
	return a.call(ctx, subject, body, out)
}

func (a *api) call(ctx context.Context, subject string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	rctx, cancel := a.conn.Ctx(ctx)
	defer cancel()
	msg, err := a.conn.NC.RequestWithContext(rctx, a.conn.APIPrefix+subject, data)
	if err != nil {
		return a.conn.Classify(rctx, err)
	}
	var answer struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil {
		return fmt.Errorf("unreadable answer to %s: %w", subject, err)
	}
	if e := answer.Error; e != nil {
		return &lanelist.APIError{Code: e.Code, ErrCode: e.ErrCode, Description: e.Description}
	}
	if out != nil {
		if err := json.Unmarshal(msg.Data, out); err != nil {
			return fmt.Errorf("unreadable answer to %s: %w", subject, err)
		}
	}
	return nil
}

// isAPIError reports whether err is the JetStream API error with this code.
func isAPIError(err error, code int) bool {
	var ae *lanelist.APIError
	return errors.As(err, &ae) && ae.ErrCode == code
}
