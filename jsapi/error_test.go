package jsapi

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
)

// TestOneErrorType: whichever way an API answer reached the caller (our
// request path, the jetstream package's sentinels or its *APIError,
// wrapped or not), one helper answers for one condition.
func TestOneErrorType(t *testing.T) {
	ours := &Error{Code: 404, ErrCode: CodeStreamNotFound, Description: "stream not found"}
	cases := []struct {
		name            string
		err             error
		stream, conumer bool
		wrongSeq        bool
		unavailable     bool
	}{
		{"ours", ours, true, false, false, false},
		{"ours wrapped", fmt.Errorf("reading ORDERS: %w", ours), true, false, false, false},
		{"client sentinel", jetstream.ErrStreamNotFound, true, false, false, false},
		{"client sentinel wrapped", fmt.Errorf("x: %w", jetstream.ErrStreamNotFound), true, false, false, false},
		{"client consumer", jetstream.ErrConsumerNotFound, false, true, false, false},
		{"client api error", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false, false, true, false},
		{"replicated wrong last sequence", &Error{Code: 400, ErrCode: CodeWrongLastSequenceConstant}, false, false, true, false},
		{"kv key exists", jetstream.ErrKeyExists, false, false, true, false},
		{"no leader, classified by connect", &connect.Error{Kind: connect.KindUnavailable, Err: &Error{Code: 503, ErrCode: CodeClusterNotAvailable}}, false, false, false, true},
		{"not an API answer", errors.New("stream not found"), false, false, false, false},
		{"nil", nil, false, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := IsStreamNotFound(c.err); got != c.stream {
				t.Errorf("IsStreamNotFound = %v", got)
			}
			if got := IsConsumerNotFound(c.err); got != c.conumer {
				t.Errorf("IsConsumerNotFound = %v", got)
			}
			if got := IsWrongLastSequence(c.err); got != c.wrongSeq {
				t.Errorf("IsWrongLastSequence = %v", got)
			}
			if got := IsUnavailable(c.err); got != c.unavailable {
				t.Errorf("IsUnavailable = %v", got)
			}
			answered := c.stream || c.conumer || c.wrongSeq || c.unavailable
			if got := Answered(c.err); got != answered {
				t.Errorf("Answered = %v", got)
			}
		})
	}
	if got := ours.Error(); got != "stream not found (err_code 10059)" {
		t.Fatalf("message %q", got)
	}
}
