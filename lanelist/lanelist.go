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
	"sync"

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

// pagesInFlight bounds the page requests List has out at once.
const pagesInFlight = 4

// List reads all consumers of stream. Each page request has the
// connection's deadline. The first page says how many consumers there are
// and how many a page holds; the other pages are then asked for at once
// (a few in flight), which lets the server's API workers and the decoding
// overlap. A page covers as many names as the server's page limit, whether
// it reports them as infos, missing or offline.
func List(ctx context.Context, c *connect.Conn, stream string) (*Listing, error) {
	subject := c.APIPrefix + "CONSUMER.LIST." + stream
	first, err := listPage(ctx, c, subject, 0)
	if err != nil {
		return nil, err
	}
	pages := []*listResponse{first}
	step := coveredNames(first)
	if first.Limit > 0 {
		step = first.Limit
	}
	if step > 0 && step < first.Total {
		rest, err := listPages(ctx, c, subject, step, first.Total)
		if err != nil {
			return nil, err
		}
		pages = append(pages, rest...)
	}
	return merge(pages), nil
}

// listPages fetches the pages at offsets step, 2*step, ... below total.
func listPages(ctx context.Context, c *connect.Conn, subject string, step, total int) ([]*listResponse, error) {
	n := (total - 1) / step
	pages := make([]*listResponse, n)
	errs := make([]error, n)
	sem := make(chan struct{}, pagesInFlight)
	var wg sync.WaitGroup
	for i := range pages {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			pages[i], errs[i] = listPage(ctx, c, subject, (i+1)*step)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pages, nil
}

// coveredNames counts the distinct consumers a page reports. The server
// lists an offline consumer both as offline (or as a nameless info) and as
// missing: counting entries would count it twice.
func coveredNames(p *listResponse) int {
	names := map[string]bool{}
	for _, ci := range p.Consumers {
		if ci != nil && ci.Name != "" {
			names[ci.Name] = true
		}
	}
	for _, n := range p.Missing {
		names[n] = true
	}
	for n := range p.Offline {
		names[n] = true
	}
	return len(names)
}

// merge joins pages, de-duplicated by name. Infos without a name (the
// server's placeholder for a consumer whose peers are all offline) are
// dropped: the consumer is named in Missing.
func merge(pages []*listResponse) *Listing {
	out := &Listing{Offline: map[string]string{}, Requests: len(pages)}
	seen := map[string]bool{}
	missing := map[string]bool{}
	for _, resp := range pages {
		for _, ci := range resp.Consumers {
			if ci == nil || ci.Name == "" || seen[ci.Name] {
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
	}
	for name := range missing {
		if !seen[name] {
			out.Missing = append(out.Missing, name)
		}
	}
	sort.Strings(out.Missing)
	sort.Slice(out.Consumers, func(i, j int) bool { return out.Consumers[i].Name < out.Consumers[j].Name })
	return out
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
