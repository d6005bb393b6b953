// Package lanelist reads a stream's consumers in one paged CONSUMER.LIST
// pass (full infos, 256 a page) and recognises which of them are lanes.
// nats.go's lister drops the cluster's "missing" and "offline" names and can
// repeat pages when consumers are missing; this one keeps them, de-duplicates
// by name, and puts a deadline on every request.
package lanelist

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
)

// Listing is every consumer of a stream, as the server reported it.
type Listing struct {
	Consumers []*jetstream.ConsumerInfo
	// Missing consumers did not answer in time (cluster: leader unavailable).
	Missing []string
	// Offline consumers are known to be offline, with the server's reason.
	Offline map[string]string
	// Requests is how many API requests the listing took.
	Requests int
}

type listResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Total     int                       `json:"total"`
	Offset    int                       `json:"offset"`
	Limit     int                       `json:"limit"`
	Consumers []*jetstream.ConsumerInfo `json:"consumers"`
	Missing   []string                  `json:"missing,omitempty"`
	Offline   map[string]string         `json:"offline,omitempty"`
}

// APIError is an error answer from the JetStream API.
type APIError struct {
	Code        int
	ErrCode     int
	Description string
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (err_code %d)", e.Description, e.ErrCode) }

// ErrCodeStreamNotFound is the JetStream API error code for a missing stream.
const ErrCodeStreamNotFound = 10059

// List reads all consumers of stream. Each page request has the
// connection's deadline; the offset advances by what the server says it
// covered, so a page with missing consumers is not asked for again.
func List(ctx context.Context, c *connect.Conn, stream string) (*Listing, error) {
	out := &Listing{Offline: map[string]string{}}
	seen := map[string]bool{}
	missing := map[string]bool{}
	subject := c.APIPrefix + "CONSUMER.LIST." + stream
	offset := 0
	for {
		resp, err := listPage(ctx, c, subject, offset)
		out.Requests++
		if err != nil {
			return nil, err
		}
		for _, ci := range resp.Consumers {
			if ci == nil || seen[ci.Name] {
				continue
			}
			seen[ci.Name] = true
			out.Consumers = append(out.Consumers, ci)
		}
		for _, name := range resp.Missing {
			missing[name] = true
		}
		for name, reason := range resp.Offline {
			out.Offline[name] = reason
		}
		covered := len(resp.Consumers) + len(resp.Missing) + len(resp.Offline)
		if covered == 0 || offset+covered >= resp.Total {
			break
		}
		offset += covered
	}
	for name := range missing {
		if !seen[name] {
			out.Missing = append(out.Missing, name)
		}
	}
	sort.Strings(out.Missing)
	sort.Slice(out.Consumers, func(i, j int) bool { return out.Consumers[i].Name < out.Consumers[j].Name })
	return out, nil
}

func listPage(ctx context.Context, c *connect.Conn, subject string, offset int) (*listResponse, error) {
	rctx, cancel := c.Ctx(ctx)
	defer cancel()
	body, _ := json.Marshal(map[string]int{"offset": offset})
	msg, err := c.NC.RequestWithContext(rctx, subject, body)
	if err != nil {
		return nil, c.Classify(rctx, err)
	}
	var resp listResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("unreadable CONSUMER.LIST answer: %w", err)
	}
	if resp.Error != nil {
		return nil, &APIError{Code: resp.Error.Code, ErrCode: resp.Error.ErrCode, Description: resp.Error.Description}
	}
	return &resp, nil
}

// Tag is what a lane's metadata says about it.
type Tag struct {
	Design      string
	Partition   int
	Partitions  int
	Source      string
	Destination string
}

// TagOf reads the lane metadata lanes writes; ok is false for consumers
// that are not tagged as lanes.
func TagOf(cfg jetstream.ConsumerConfig) (Tag, bool) {
	m := cfg.Metadata
	design, ok := m[planner.MetaDesign]
	if !ok {
		return Tag{}, false
	}
	p, err1 := strconv.Atoi(m[planner.MetaPartition])
	n, err2 := strconv.Atoi(m[planner.MetaPartitions])
	if err1 != nil || err2 != nil || n < 1 || p < 0 || p >= n {
		return Tag{}, false
	}
	return Tag{Design: design, Partition: p, Partitions: n,
		Source: m[planner.MetaSource], Destination: m[planner.MetaDestination]}, true
}
