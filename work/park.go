package work

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
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
	pm.Header.Set(HeaderParkedError, planner.OneLine(errText(cause), 1024))
	pm.Header.Set(HeaderParkedInstance, msg.Instance)
	pm.Header.Set(HeaderParkedAt, time.Now().UTC().Format(time.RFC3339Nano))
	pm.Header.Set(jetstream.MsgIDHeader, "lanes-parked:"+msg.Stream+":"+strconv.FormatUint(msg.Seq, 10))
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, pm)
	return err
}
