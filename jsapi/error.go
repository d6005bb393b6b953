package jsapi

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Error is an error answer from the JetStream API: every caller checks
// this one type, whether the answer came through Client or through the
// jetstream client package (As converts the latter).
type Error struct {
	Code        int    `json:"code"`     // HTTP-like status: 400, 404, 503
	ErrCode     int    `json:"err_code"` // the server's own code, e.g. 10059
	Description string `json:"description"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (err_code %d)", e.Description, e.ErrCode) }

// The server's error codes lanes reacts to (nats-server's
// server/errors.json).
const (
	CodeClusterNotAvailable = 10008 // no meta leader: the cluster cannot answer
	// CodeNoPeers: no node to place a replica on ("no suitable peers for
	// placement"); right after a cluster starts, the meta leader may not
	// have every node's stats yet.
	CodeNoPeers          = 10005
	CodeConsumerNotFound = 10014
	CodeMessageNotFound  = 10037
	CodeStreamNotFound   = 10059
	// CodeWrongLastSequence: a write on the condition of a sequence (a KV
	// create or update) found another one. Replicated streams answer
	// CodeWrongLastSequenceConstant instead.
	CodeWrongLastSequence         = 10071
	CodeWrongLastSequenceConstant = 10164
)

// As finds the API error in err's chain: ours, or the jetstream package's
// (returned by its KV and stream helpers), as an *Error.
func As(err error) (*Error, bool) {
	if err == nil {
		return nil, false
	}
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	var je *jetstream.APIError
	if errors.As(err, &je) && je != nil {
		return &Error{Code: je.Code, ErrCode: int(je.ErrorCode), Description: je.Description}, true
	}
	return nil, false
}

// HasCode reports whether err is an API answer with one of these error codes.
func HasCode(err error, codes ...int) bool {
	e, ok := As(err)
	if !ok {
		return false
	}
	for _, c := range codes {
		if e.ErrCode == c {
			return true
		}
	}
	return false
}

// IsStreamNotFound: the stream does not exist.
func IsStreamNotFound(err error) bool { return HasCode(err, CodeStreamNotFound) }

// IsNoPeers: the cluster could not place a replica, for now perhaps
// (see CodeNoPeers).
func IsNoPeers(err error) bool { return HasCode(err, CodeNoPeers) }

// IsConsumerNotFound: the consumer does not exist.
func IsConsumerNotFound(err error) bool { return HasCode(err, CodeConsumerNotFound) }

// IsMessageNotFound: no message at or after the sequence asked for.
func IsMessageNotFound(err error) bool { return HasCode(err, CodeMessageNotFound) }

// IsWrongLastSequence: a conditional write lost to another writer (on a
// KV key: it exists, or changed since it was read).
func IsWrongLastSequence(err error) bool {
	return HasCode(err, CodeWrongLastSequence, CodeWrongLastSequenceConstant)
}

// IsUnavailable: JetStream answered that it cannot serve the request now
// (503: no leader, or the servers holding the asset are down).
func IsUnavailable(err error) bool {
	e, ok := As(err)
	return ok && e.Code == 503
}

// Answered reports whether the server answered the request with an
// error: it failed for sure. Any other error (a timeout, a cancellation)
// leaves its outcome unknown.
func Answered(err error) bool {
	_, ok := As(err)
	return ok
}
