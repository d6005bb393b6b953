package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamInfo reads a stream's config and state (STREAM.INFO).
func (c *Client) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	var info jetstream.StreamInfo
	if err := c.Read(ctx, "STREAM.INFO."+stream, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// RawStreamInfo is a stream's info with its config as the server wrote
// it: every field, also those the jetstream package does not know, for an
// update that sends the config back (a stream update replaces all of it).
type RawStreamInfo struct {
	Config json.RawMessage       `json:"config"`
	State  jetstream.StreamState `json:"state"`
}

// StreamInfoRaw reads a stream's config, as it is, and its state
// (STREAM.INFO).
func (c *Client) StreamInfoRaw(ctx context.Context, stream string) (*RawStreamInfo, error) {
	var info RawStreamInfo
	if err := c.Read(ctx, "STREAM.INFO."+stream, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// CreateStream creates stream name (STREAM.CREATE). config is sent as it
// is: a planner.StreamConfig, or a map of the fields to send.
func (c *Client) CreateStream(ctx context.Context, name string, config any) error {
	return c.Write(ctx, "STREAM.CREATE."+name, config, nil)
}

// UpdateStream replaces the config of stream name (STREAM.UPDATE): a
// field left out takes its default. Send a config built from a fresh read
// (StreamInfoRaw), or what others changed since is reverted; there is no
// compare-and-set.
func (c *Client) UpdateStream(ctx context.Context, name string, config any) error {
	return c.Write(ctx, "STREAM.UPDATE."+name, config, nil)
}

// DeleteStream deletes stream name and its consumers (STREAM.DELETE). One
// that does not exist is an error IsStreamNotFound.
func (c *Client) DeleteStream(ctx context.Context, name string) error {
	return c.Write(ctx, "STREAM.DELETE."+name, nil, nil)
}

// StreamNames reads the names of the account's streams (STREAM.NAMES,
// paged): every one, or those that store subject when it is not "".
func (c *Client) StreamNames(ctx context.Context, subject string) ([]string, error) {
	return c.names(ctx, "STREAM.NAMES", subject)
}

// StreamBySubject names the stream that stores subject (one STREAM.NAMES
// request). When none does, the error is IsStreamNotFound.
func (c *Client) StreamBySubject(ctx context.Context, subject string) (string, error) {
	if subject == "" {
		return "", errors.New("no subject given") // the server would list every stream
	}
	names, err := c.StreamNames(ctx, subject)
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", &Error{Code: 404, ErrCode: CodeStreamNotFound, Description: "no stream stores " + subject}
	}
	return names[0], nil
}

// Subjects reads how many messages a stream holds per subject matching
// filter (STREAM.INFO with a subjects filter, paged as the server limits
// it). Callers bound the count first: the whole list is held in memory.
func (c *Client) Subjects(ctx context.Context, stream, filter string) (map[string]uint64, error) {
	subjects := map[string]uint64{}
	for {
		var page struct {
			Total int `json:"total"`
			State struct {
				Subjects map[string]uint64 `json:"subjects"`
			} `json:"state"`
		}
		req := map[string]any{"subjects_filter": filter, "offset": len(subjects)}
		if err := c.Read(ctx, "STREAM.INFO."+stream, req, &page); err != nil {
			return nil, err
		}
		for s, n := range page.State.Subjects {
			subjects[s] = n
		}
		if len(page.State.Subjects) == 0 || page.Total <= len(subjects) {
			return subjects, nil
		}
	}
}

// Msg is a stored message's place: its sequence, subject and store time.
type Msg struct {
	Seq     uint64
	Subject string
	Time    time.Time
}

// NextMsg reads the first message at or after seq on subject (a filter),
// with a direct get when the stream allows it (any replica answers) and a
// STREAM.MSG.GET otherwise. No such message is an Error with
// CodeMessageNotFound.
func (c *Client) NextMsg(ctx context.Context, stream string, seq uint64, subject string, direct bool) (*Msg, error) {
	req := struct {
		Seq        uint64 `json:"seq"`
		NextBySubj string `json:"next_by_subj"`
	}{seq, subject}
	if !direct {
		var answer struct {
			Message *struct {
				Subject  string    `json:"subject"`
				Sequence uint64    `json:"seq"`
				Time     time.Time `json:"time"`
			} `json:"message"`
		}
		if err := c.Read(ctx, "STREAM.MSG.GET."+stream, req, &answer); err != nil {
			return nil, err
		}
		if answer.Message == nil {
			return nil, errors.New("unreadable answer to STREAM.MSG.GET: no message")
		}
		m := answer.Message
		return &Msg{Seq: m.Sequence, Subject: m.Subject, Time: m.Time}, nil
	}
	data, err := marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := c.request(ctx, "DIRECT.GET."+stream, data)
	if err != nil {
		return nil, err
	}
	// A direct get answers in headers; an empty message with a status
	// header is an error (404: no message).
	h := msg.Header
	if len(msg.Data) == 0 && h.Get("Status") != "" {
		if h.Get("Status") == "404" {
			return nil, &Error{Code: 404, ErrCode: CodeMessageNotFound, Description: "no message found"}
		}
		code, _ := strconv.Atoi(h.Get("Status"))
		return nil, &Error{Code: code, Description: h.Get("Description")}
	}
	seqNo, err1 := strconv.ParseUint(h.Get(jetstream.SequenceHeader), 10, 64)
	at, err2 := time.Parse(time.RFC3339Nano, h.Get(jetstream.TimeStampHeaer))
	if err := errors.Join(err1, err2); err != nil || h.Get(jetstream.SubjectHeader) == "" {
		return nil, fmt.Errorf("unreadable answer to DIRECT.GET: %v", err)
	}
	return &Msg{Seq: seqNo, Subject: h.Get(jetstream.SubjectHeader), Time: at}, nil
}

// Stored is what a stream holds on a subject filter from a sequence on.
type Stored struct {
	First   uint64 // the first such message's stream sequence; 0: none
	Count   uint64 // how many there are, when Counted
	Counted bool   // false: the server could not count them (no direct gets)
}

// StoredFrom reads how many messages are stored on filter at or after seq,
// and the first of them, without writing anything: a direct get of one
// message in a batch (nats-server 2.11+), whose Nats-Num-Pending header
// counts the rest. A stream that does not allow direct gets can only say
// which message is first (STREAM.MSG.GET): Counted is then false.
func (c *Client) StoredFrom(ctx context.Context, stream string, seq uint64, filter string, direct bool) (Stored, error) {
	if !direct {
		m, err := c.NextMsg(ctx, stream, seq, filter, false)
		if IsMessageNotFound(err) {
			return Stored{Counted: true}, nil
		}
		if err != nil {
			return Stored{}, err
		}
		return Stored{First: m.Seq}, nil
	}
	data, err := marshal(map[string]any{"seq": seq, "next_by_subj": filter, "batch": 1})
	if err != nil {
		return Stored{}, err
	}
	msg, err := c.request(ctx, "DIRECT.GET."+stream, data)
	if err != nil {
		return Stored{}, err
	}
	h := msg.Header
	switch status := h.Get("Status"); {
	case status == "404":
		return Stored{Counted: true}, nil
	case status != "":
		code, _ := strconv.Atoi(status)
		return Stored{}, &Error{Code: code, Description: h.Get("Description")}
	}
	first, err := strconv.ParseUint(h.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return Stored{}, fmt.Errorf("unreadable answer to DIRECT.GET: %v", err)
	}
	// The header counts the messages after this one; a server that does
	// not batch (before 2.11) leaves it out.
	rest, err := strconv.ParseUint(h.Get(numPendingHeader), 10, 64)
	if err != nil {
		return Stored{First: first}, nil
	}
	return Stored{First: first, Count: rest + 1, Counted: true}, nil
}

// numPendingHeader is how many messages a batched direct get has left
// after the one it carries (nats-server's JSNumPending).
const numPendingHeader = "Nats-Num-Pending"
