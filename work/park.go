package work

import (
	"context"

	"github.com/nats-io/nats.go"
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
	pm := ParkedCopy(w.cfg.DeadLetter, m.Header, m.Data, msg, reason, errText(cause), msg.Instance)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	_, err := w.js.PublishMsg(ctx, pm)
	return err
}
