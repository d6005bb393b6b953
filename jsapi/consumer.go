package jsapi

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The consumer writes take the config as it is to be sent: a
// planner.ConsumerConfig, or a map of exactly the fields to send (apply
// sends only the fields a design decides, so that an update leaves the
// others as they are). Each is one request, counted as a write.

// CreateConsumer creates consumer name on stream (CONSUMER.CREATE with
// action create): the server refuses it if a consumer of that name exists
// with another config, and accepts it (changing nothing) if it has this
// one. It returns the consumer as the server made it.
func (c *Client) CreateConsumer(ctx context.Context, stream, name string, config any) (*jetstream.ConsumerInfo, error) {
	return c.putConsumer(ctx, stream, name, "create", config)
}

// UpdateConsumer changes the config of consumer name on stream (action
// update): the server refuses it if there is no such consumer or if the
// change touches a field it cannot update (err_code 10012). A pause is
// not changed this way (PauseConsumer).
func (c *Client) UpdateConsumer(ctx context.Context, stream, name string, config any) (*jetstream.ConsumerInfo, error) {
	return c.putConsumer(ctx, stream, name, "update", config)
}

// CreateOrUpdateConsumer creates consumer name on stream, or updates it
// if it exists (no action: either).
func (c *Client) CreateOrUpdateConsumer(ctx context.Context, stream, name string, config any) (*jetstream.ConsumerInfo, error) {
	return c.putConsumer(ctx, stream, name, "", config)
}

func (c *Client) putConsumer(ctx context.Context, stream, name, action string, config any) (*jetstream.ConsumerInfo, error) {
	req := struct {
		Stream string `json:"stream_name"`
		Config any    `json:"config"`
		Action string `json:"action,omitempty"`
	}{stream, config, action}
	var info jetstream.ConsumerInfo
	if err := c.Write(ctx, "CONSUMER.CREATE."+stream+"."+name, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// PauseConsumer pauses consumer name on stream until a time
// (CONSUMER.PAUSE): it delivers nothing before then. The zero time
// resumes it at once. Pull requests already waiting are not woken by a
// resume: their workers pull again.
func (c *Client) PauseConsumer(ctx context.Context, stream, name string, until time.Time) error {
	var req struct {
		Until *time.Time `json:"pause_until,omitempty"`
	}
	if !until.IsZero() {
		req.Until = &until
	}
	return c.Write(ctx, "CONSUMER.PAUSE."+stream+"."+name, req, nil)
}

// UnpinConsumer unpins the client pinned in a priority group of consumer
// name (CONSUMER.UNPIN, nats-server 2.11+): the server pins another
// client that pulls.
func (c *Client) UnpinConsumer(ctx context.Context, stream, name, group string) error {
	req := struct {
		Group string `json:"group"`
	}{group}
	return c.Write(ctx, "CONSUMER.UNPIN."+stream+"."+name, req, nil)
}

// DeleteConsumer deletes consumer name of stream (CONSUMER.DELETE). One
// that does not exist is an error IsConsumerNotFound.
func (c *Client) DeleteConsumer(ctx context.Context, stream, name string) error {
	return c.Write(ctx, "CONSUMER.DELETE."+stream+"."+name, nil, nil)
}

// ConsumerInfo reads a consumer's config and state (CONSUMER.INFO). One
// that does not exist is an error IsConsumerNotFound.
func (c *Client) ConsumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	var info jetstream.ConsumerInfo
	if err := c.Read(ctx, "CONSUMER.INFO."+stream+"."+name, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
