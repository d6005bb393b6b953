package actions

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/jsapi"
)

// The parked messages' reads and deletes. They belong in jsapi as typed
// methods (a message get with its headers and payload, a message delete);
// until then they go through jsapi's one request path (its deadline,
// permission guard and error type), named here once.

// storedMsg is a stored message with its headers and payload.
type storedMsg struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Header  nats.Header
	Data    []byte
}

// getMsg reads the message at seq, or with subject set the first one at or
// after seq on subject. None is an error IsMessageNotFound.
func getMsg(ctx context.Context, api *jsapi.Client, stream string, seq uint64, subject string) (*storedMsg, error) {
	req := struct {
		Seq        uint64 `json:"seq"`
		NextBySubj string `json:"next_by_subj,omitempty"`
	}{seq, subject}
	var answer struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Hdrs    []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := api.Read(ctx, "STREAM.MSG.GET."+stream, req, &answer); err != nil {
		return nil, err
	}
	m := answer.Message
	if m == nil {
		return nil, fmt.Errorf("unreadable answer to STREAM.MSG.GET.%s: no message", stream)
	}
	out := &storedMsg{Seq: m.Seq, Subject: m.Subject, Time: m.Time, Data: m.Data, Header: nats.Header{}}
	if len(m.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Hdrs)
		if err != nil {
			return nil, fmt.Errorf("message %d of stream %s: unreadable headers: %w", m.Seq, stream, err)
		}
		out.Header = h
	}
	return out, nil
}

// deleteMsg deletes the message at seq from stream. gone is true when it
// was no longer there (another operator, or an earlier run, deleted it).
func deleteMsg(ctx context.Context, api *jsapi.Client, stream string, seq uint64) (gone bool, err error) {
	req := struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true}
	err = api.Write(ctx, "STREAM.MSG.DELETE."+stream, req, nil)
	if _, answered := jsapi.As(err); !answered {
		return false, err
	}
	// The server refused: because the message is gone, or for a reason
	// of its own (a stream that denies deletes), which is said as it is.
	if _, gerr := getMsg(ctx, api, stream, seq, ""); jsapi.IsMessageNotFound(gerr) {
		return true, nil
	}
	return false, fmt.Errorf("deleting message %d of stream %s: %w", seq, stream, err)
}
