package work

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
)

// Headers of a parked message: where it came from and why it was parked.
// Its own headers are kept (except the server's Nats-*); its payload is
// unchanged.
const (
	HeaderParkedStream   = "Lanes-Parked-Stream"
	HeaderParkedSeq      = "Lanes-Parked-Seq"
	HeaderParkedSubject  = "Lanes-Parked-Subject"
	HeaderParkedLane     = "Lanes-Parked-Lane"
	HeaderParkedKey      = "Lanes-Parked-Key"
	HeaderParkedAttempts = "Lanes-Parked-Attempts"
	HeaderParkedReason   = "Lanes-Parked-Reason"
	HeaderParkedError    = "Lanes-Parked-Error"
	HeaderParkedInstance = "Lanes-Parked-Instance"
	HeaderParkedAt       = "Lanes-Parked-At"
)

// park republishes a message to the dead-letter subject and waits for the
// stream's ack; the caller acks the original only then, so a crash in
// between parks it twice at worst, and the message ID makes the stream
// drop the second copy (within its duplicate window).
func (w *Worker) park(m *nats.Msg, msg *Msg, reason string, cause error) error {
	pm := nats.NewMsg(w.cfg.DeadLetter)
	pm.Data = m.Data
	for k, v := range m.Header {
		if !strings.HasPrefix(k, "Nats-") {
			pm.Header[k] = v
		}
	}
	pm.Header.Set(HeaderParkedStream, msg.Stream)
	pm.Header.Set(HeaderParkedSeq, strconv.FormatUint(msg.Seq, 10))
	pm.Header.Set(HeaderParkedSubject, msg.Subject)
	pm.Header.Set(HeaderParkedLane, msg.Lane)
	pm.Header.Set(HeaderParkedKey, msg.Key)
	pm.Header.Set(HeaderParkedAttempts, strconv.Itoa(msg.Attempt))
	pm.Header.Set(HeaderParkedReason, reason)
	pm.Header.Set(HeaderParkedError, oneLine(errText(cause), 1024))
	pm.Header.Set(HeaderParkedInstance, msg.Instance)
	pm.Header.Set(HeaderParkedAt, time.Now().UTC().Format(time.RFC3339Nano))
	pm.Header.Set(jetstream.MsgIDHeader, "lanes-parked:"+msg.Stream+":"+strconv.FormatUint(msg.Seq, 10))
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, pm)
	return err
}

// oneLine makes text fit a header value: one line, at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// CountParked counts the messages stored on a dead-letter subject, and
// which stream stores them. ok is false when no stream stores the subject.
func CountParked(ctx context.Context, js jetstream.JetStream, subject string) (count uint64, stream string, ok bool, err error) {
	stream, err = js.StreamNameBySubject(ctx, subject)
	if jsapi.IsStreamNotFound(err) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, stream, false, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, stream, false, fmt.Errorf("dead-letter stream %s: %w", stream, err)
	}
	for subj, n := range info.State.Subjects {
		if subj == subject {
			count += n
		}
	}
	return count, stream, true, nil
}
