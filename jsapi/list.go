package jsapi

import (
	"context"
	"errors"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lanes-dev/lanes/connect"
)

// Listing is every consumer of a stream, as the server reported it.
type Listing struct {
	Consumers []*jetstream.ConsumerInfo // sorted by name, each once, every one named
	// Missing consumers did not answer in time (cluster: leader unavailable).
	Missing []string
	// Offline consumers are known to be offline, with the server's reason.
	Offline map[string]string
	// Requests is how many API requests the listing took.
	Requests int
}

// Empty is the listing of a stream that has no consumers (or does not exist).
func Empty() *Listing { return &Listing{Offline: map[string]string{}} }

type listPage struct {
	Total     int                       `json:"total"`
	Offset    int                       `json:"offset"`
	Limit     int                       `json:"limit"`
	Consumers []*jetstream.ConsumerInfo `json:"consumers"`
	Missing   []string                  `json:"missing,omitempty"`
	Offline   map[string]string         `json:"offline,omitempty"`
}

type offsetRequest struct {
	Offset int `json:"offset"`
}

// pagesInFlight bounds the page requests List has out at once.
const pagesInFlight = 4

// List reads all consumers of stream in one paged CONSUMER.LIST pass (full
// infos, 256 a page). nats.go's lister drops the cluster's "missing" and
// "offline" names and can repeat pages when consumers are missing; this one
// keeps them, de-duplicates by name, and puts the connection's deadline on
// every request. The first page says how many consumers there are and how
// many a page holds; the other pages are then asked for at once (a few in
// flight), which lets the server's API workers and the decoding overlap. A
// page covers as many names as the server's page limit, whether it reports
// them as infos, missing or offline.
func (c *Client) List(ctx context.Context, stream string) (*Listing, error) {
	api := "CONSUMER.LIST." + stream
	first, err := c.listPage(ctx, api, 0)
	if err != nil {
		return nil, err
	}
	pages := []*listPage{first}
	step := coveredNames(first)
	if first.Limit > 0 {
		step = first.Limit
	}
	if step > 0 && step < first.Total {
		rest, err := c.listPages(ctx, api, step, first.Total)
		if err != nil {
			return nil, err
		}
		pages = append(pages, rest...)
	}
	return merge(pages), nil
}

// listPages fetches the pages at offsets step, 2*step, ... below total.
func (c *Client) listPages(ctx context.Context, api string, step, total int) ([]*listPage, error) {
	pages := make([]*listPage, (total-1)/step)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(pagesInFlight)
	for i := range pages {
		g.Go(func() (err error) {
			pages[i], err = c.listPage(ctx, api, (i+1)*step)
			return err
		})
	}
	return pages, g.Wait()
}

func (c *Client) listPage(ctx context.Context, api string, offset int) (*listPage, error) {
	var page listPage
	if err := c.Read(ctx, api, offsetRequest{offset}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// coveredNames counts the distinct consumers a page reports. The server
// lists an offline consumer both as offline (or as a nameless info) and as
// missing: counting entries would count it twice.
func coveredNames(p *listPage) int {
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
func merge(pages []*listPage) *Listing {
	out := Empty()
	out.Requests = len(pages)
	seen := map[string]bool{}
	missing := map[string]bool{}
	for _, page := range pages {
		for _, ci := range page.Consumers {
			if ci == nil || ci.Name == "" || seen[ci.Name] {
				continue
			}
			seen[ci.Name] = true
			out.Consumers = append(out.Consumers, ci)
		}
		for _, name := range page.Missing {
			missing[name] = true
		}
		for name, reason := range page.Offline {
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

// ListEach reads the consumers of stream without CONSUMER.LIST, for a
// cluster whose LIST does not answer in time (the server waits up to 4 s
// for every consumer's leader before it answers a page): the names come
// from CONSUMER.NAMES (the meta leader answers at once, 1,024 a page), the
// infos from one CONSUMER.INFO per consumer to its own leader, inFlight at
// once, within ctx's deadline. A consumer whose leader does not answer is
// missing; one whose leader answers with an error is offline; one deleted
// meanwhile is left out. A permissions violation fails the whole listing.
func (c *Client) ListEach(ctx context.Context, stream string, inFlight int) (*Listing, error) {
	ctx, release := c.Guard(ctx)
	defer release()
	names, err := c.Names(ctx, stream)
	if err != nil {
		return nil, err
	}
	infos := make([]*jetstream.ConsumerInfo, len(names))
	problems := make([]string, len(names))
	var g errgroup.Group
	g.SetLimit(max(inFlight, 1))
	for i, name := range names {
		g.Go(func() error {
			infos[i], problems[i] = c.consumerInfo(ctx, stream, name)
			return nil
		})
	}
	g.Wait()
	var denied *connect.Error
	if errors.As(context.Cause(ctx), &denied) {
		return nil, denied
	}
	out := Empty()
	for i, name := range names {
		switch {
		case infos[i] != nil:
			out.Consumers = append(out.Consumers, infos[i])
		case problems[i] == "":
			out.Missing = append(out.Missing, name)
		case problems[i] != deleted:
			out.Offline[name] = problems[i]
		}
	}
	sort.Slice(out.Consumers, func(i, j int) bool { return out.Consumers[i].Name < out.Consumers[j].Name })
	sort.Strings(out.Missing)
	out.Requests = int(c.Requests())
	return out, nil
}

const deleted = "\x00deleted"

// consumerInfo asks one consumer's leader. It returns the info, or why
// not: "" when no answer came in time, deleted for a consumer gone since,
// else the server's description.
func (c *Client) consumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, string) {
	info, err := c.ConsumerInfo(ctx, stream, name)
	e, answered := As(err)
	switch {
	case err == nil:
		return info, ""
	case !answered:
		return nil, ""
	case e.ErrCode == CodeConsumerNotFound:
		return nil, deleted
	}
	return nil, e.Description
}

// Names reads the names of stream's consumers (CONSUMER.NAMES, paged).
func (c *Client) Names(ctx context.Context, stream string) ([]string, error) {
	return c.names(ctx, "CONSUMER.NAMES."+stream, "")
}

// names reads a paged list of names (CONSUMER.NAMES, STREAM.NAMES), of
// the streams that store subject when it is not "".
func (c *Client) names(ctx context.Context, api, subject string) ([]string, error) {
	var names []string
	for {
		var page struct {
			Total     int      `json:"total"`
			Consumers []string `json:"consumers"`
			Streams   []string `json:"streams"`
		}
		req := struct {
			Offset  int    `json:"offset"`
			Subject string `json:"subject,omitempty"`
		}{len(names), subject}
		if err := c.Read(ctx, api, req, &page); err != nil {
			return nil, err
		}
		got := append(page.Consumers, page.Streams...)
		names = append(names, got...)
		if len(got) == 0 || len(names) >= page.Total {
			return names, nil
		}
	}
}
