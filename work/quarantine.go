package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// A poison key is quarantined (--on-poison quarantine): once a message has
// failed ParkAfter times, its key is recorded in the membership bucket
// (membership.Quarantine, create-only: the first failure stays the
// record), and only then is the message parked and acked, so that the
// key's next message can never run unparked. Every instance watches the
// design's records (loaded before any lane is served) and, whatever its
// own policy, settles a message of a quarantined key without running it,
// when its turn comes (a serial lane before the handler; a key-parallel
// lane when the key's earlier message is settled, so the key's messages
// stay in order):
//   - quarantined: parked and acked;
//   - replaying (lanes parked replay): copies carrying the replay's ID
//     (header Lanes-Replay-Id) run; others are parked, for a later round;
//   - lifting: copies run; others are held (a delayed nak: neither run nor
//     parked) until the record is deleted, then they run in order.
//
// An instance without a dead-letter subject cannot park: it holds the
// key's messages instead (on a serial lane that holds the lane), and says
// so. A replayed copy that fails ParkAfter times again sets the record
// back to quarantined: the replay stops, and the key's later copies are
// parked behind it.

// HeaderReplayID marks a replayed copy of a quarantined key's parked
// message: it runs while the record's ReplayID is the same.
const HeaderReplayID = "Lanes-Replay-Id"

// quarantineHold is the delay of a held message's nak.
const quarantineHold = time.Second

// quarantineBook is the design's quarantine records as this instance's
// watch (or its own writes) last saw them, by record key.
type quarantineBook struct {
	held   atomic.Int64 // keys in byKey: none (the usual case) costs a message nothing
	mu     sync.Mutex
	byKey  map[string]*membership.QuarantineEntry
	rev    map[string]uint64 // the last revision seen per record key (a delete too)
	warned map[string]bool   // keys held for want of a dead-letter subject, said once
}

// set keeps e (nil: deleted) unless a later revision is known already.
func (b *quarantineBook) set(rkey string, e *membership.QuarantineEntry, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byKey == nil {
		b.byKey, b.rev, b.warned = map[string]*membership.QuarantineEntry{}, map[string]uint64{}, map[string]bool{}
	}
	if rev < b.rev[rkey] {
		return
	}
	b.rev[rkey] = rev
	defer func() { b.held.Store(int64(len(b.byKey))) }()
	if e == nil {
		delete(b.byKey, rkey)
		return
	}
	b.byKey[rkey] = e
}

func (b *quarantineBook) get(rkey string) *membership.QuarantineEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byKey[rkey]
}

// warnOnce reports whether rkey is told for the first time.
func (b *quarantineBook) warnOnce(rkey string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.warned == nil {
		b.warned = map[string]bool{}
	}
	first := !b.warned[rkey]
	b.warned[rkey] = true
	return first
}

// watchQuarantines follows the design's quarantine records until the
// returned stop is called, the records already there read first: a lane
// taken from now on never runs a message of a quarantined key.
func (w *Worker) watchQuarantines() (stop func()) {
	return w.watchRecords("the quarantined keys", membership.QuarantineKeys(w.scope), func(e jetstream.KeyValueEntry) {
		qe, _ := membership.ParseQuarantine(e)
		w.quarantines.set(e.Key(), qe, e.Revision())
	})
}

// qAct is what happens to a message of a key that may be quarantined.
type qAct int

const (
	qRun  qAct = iota // not quarantined, or a copy of the replay under way
	qPark             // parked unrun, then acked
	qHold             // handed back with a delay, neither run nor parked
)

// quarantineDecision is what a message carrying replayID (its
// Lanes-Replay-Id header, "" when none) gets under record e (nil: the key
// is not quarantined), on an instance that can park or not.
func quarantineDecision(e *membership.Quarantine, replayID string, canPark bool) qAct {
	switch {
	case e == nil:
		return qRun
	case e.State != membership.QuarantineOn && e.ReplayID != "" && replayID == e.ReplayID:
		return qRun
	case !canPark || e.State == membership.QuarantineLifting:
		return qHold
	}
	return qPark
}

// quarantineAct decides for msg by this instance's book.
func (w *Worker) quarantineAct(msg *Msg) (qAct, *membership.QuarantineEntry) {
	if w.quarantines.held.Load() == 0 {
		return qRun, nil
	}
	rkey := membership.QuarantineKey(w.scope, msg.Key)
	e := w.quarantines.get(rkey)
	if e == nil {
		return qRun, nil
	}
	act := quarantineDecision(&e.Quarantine, msg.Header.Get(HeaderReplayID), w.cfg.DeadLetter != "")
	if act == qHold && w.cfg.DeadLetter == "" && w.quarantines.warnOnce(rkey) {
		w.log.Error("key quarantined, but this instance has no dead-letter subject to park its messages on: they are held (run with --dead-letter)",
			"lane", msg.Lane, "key", msg.Key, "since_seq", e.Seq)
	}
	return act, e
}

// quarantinedReason is what a message of a quarantined key is parked with.
func quarantinedReason(e *membership.QuarantineEntry) string {
	return "key quarantined since seq " + strconv.FormatUint(e.Seq, 10)
}

// quarantineKey records msg's key as quarantined after its failure herr,
// before the message is parked; it returns the park's reason. A record
// there already stays (the first failure), but one under replay is set
// back to quarantined: a replayed copy failed again, so the replay stops
// and the key's later copies are parked behind it.
func (w *Worker) quarantineKey(msg *Msg, herr error) (string, error) {
	reason := "quarantined: failed " + strconv.Itoa(msg.Attempt) + " time(s)"
	ctx, cancel := context.WithTimeout(context.Background(), 2*w.cfg.Timeout)
	defer cancel()
	q := membership.Quarantines{KV: w.records().KV, Scope: w.scope}
	rec := membership.Quarantine{Key: msg.Key, Lane: msg.Lane, Seq: msg.Seq, At: time.Now(), Instance: w.cfg.Instance,
		Error: planner.OneLine(errText(herr), 512), State: membership.QuarantineOn}
	for try := 0; try < 5; try++ {
		e, err := q.Create(ctx, rec)
		if err == nil {
			w.quarantines.set(membership.QuarantineKey(w.scope, msg.Key), e, e.Rev)
			w.log.Warn("key quarantined: its messages are parked unrun until lanes parked replay --key lifts it",
				"lane", msg.Lane, "key", msg.Key, "seq", msg.Seq, "error", herr)
			return reason, nil
		}
		if !errors.Is(err, membership.ErrQuarantineChanged) {
			return "", err
		}
		cur, err := q.Get(ctx, msg.Key)
		if err != nil {
			return "", err
		}
		if cur == nil {
			continue // lifted meanwhile: quarantined again, from this failure
		}
		if cur.State != membership.QuarantineOn {
			back := cur.Quarantine
			back.State, back.ReplayID, back.ReplayBy = membership.QuarantineOn, "", ""
			back.Error = fmt.Sprintf("seq %d failed again during the replay: %s", msg.Seq, rec.Error)
			up, err := q.Update(ctx, back, cur.Rev)
			if errors.Is(err, membership.ErrQuarantineChanged) {
				continue
			}
			if err != nil {
				return "", err
			}
			cur = up
			w.log.Warn("a replayed message of a quarantined key failed again: the key stays quarantined, the replay stops",
				"lane", msg.Lane, "key", msg.Key, "seq", msg.Seq, "error", herr)
		}
		w.quarantines.set(membership.QuarantineKey(w.scope, msg.Key), cur, cur.Rev)
		return reason, nil
	}
	return "", errors.New("the quarantine record kept changing")
}

// quarantineDelivery settles a serial lane's delivery of a quarantined key
// instead of running it (parked and acked, or held); false when it may run.
func (l *lane) quarantineDelivery(p *puller, m *nats.Msg, msg *Msg) bool {
	act, e := l.w.quarantineAct(msg)
	if act == qRun {
		return false
	}
	f := l.takeUnrun(p, m, msg)
	if f == nil {
		return true
	}
	attrs := []any{"lane", l.name, "seq", msg.Seq, "key", msg.Key, "quarantined_since", e.Seq}
	if act == qHold {
		if l.mayNak(f) {
			_ = m.Respond(fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(quarantineHold)))
		}
		l.w.log.Debug("message of a quarantined key held", append(attrs, "state", e.State)...)
		return true
	}
	reason := quarantinedReason(e)
	if err := l.w.park(m, msg, reason, errors.New(reason)); err != nil {
		l.w.log.Error("cannot park a message of a quarantined key: it comes back and is parked then", append(attrs, "error", err)...)
		if l.mayNak(f) {
			_ = m.Respond(fmt.Appendf(nil, `-NAK {"delay":%d}`, int64(quarantineHold)))
		}
		return true
	}
	if err := l.confirm(p, m, []byte("+ACK")); err != nil {
		l.stats.unconfirmed.Add(1)
		l.w.log.Error("ack of a parked message not confirmed: it will be redelivered and parked again (deduplicated)", append(attrs, "error", err)...)
		if p.sub != nil {
			l.resync(p)
		}
		return true
	}
	l.stats.parked.Add(1)
	l.processed.Store(msg.Seq)
	l.w.log.Info("message of a quarantined key parked", append(attrs, "dead_letter", l.w.cfg.DeadLetter)...)
	return true
}

// quarantinedError is what a key-parallel lane's message of a quarantined
// key gets instead of a run (see judgeQuarantined).
type quarantinedError struct {
	act qAct
	e   *membership.QuarantineEntry
}

func (e *quarantinedError) Error() string {
	if e.act == qHold {
		return fmt.Sprintf("key quarantined since seq %d (%s): held", e.e.Seq, e.e.State)
	}
	return quarantinedReason(e.e)
}

// runKeyed runs a key-parallel lane's message when its turn comes, unless
// its key is quarantined (or a skip names it).
func (l *lane) runKeyed(ctx context.Context, msg *Msg) error {
	if act, e := l.w.quarantineAct(msg); act != qRun {
		return &quarantinedError{act: act, e: e}
	}
	return l.runOrSkip(ctx, msg)
}

// judgeQuarantined is judge for a message of a quarantined key: parked
// (then acked), or held with a delayed nak.
func (l *lane) judgeQuarantined(h *held, m *nats.Msg, msg *Msg, q *quarantinedError, took time.Duration) result {
	o := result{h: h, took: took, err: q}
	if q.act == qHold {
		o.kind, o.delay = doNak, quarantineHold
		return o
	}
	reason := quarantinedReason(q.e)
	if err := l.w.park(m, msg, reason, q); err != nil {
		l.w.log.Error("cannot park a message of a quarantined key: it is tried again", "lane", l.name, "seq", msg.Seq, "key", msg.Key, "error", err)
		o.kind, o.delay = doNak, quarantineHold
		return o
	}
	o.kind, o.park = doAck, reason
	return o
}

// parksPoison: a message that failed ParkAfter times is parked: under
// policy Park or Quarantine, and whatever the policy when its key is
// quarantined (a replayed copy that fails again must stop the replay, not
// block the lane or be parked while the key's later copies run).
func (w *Worker) parksPoison(msg *Msg) bool {
	return w.cfg.OnPoison != Block || w.quarantines.get(membership.QuarantineKey(w.scope, msg.Key)) != nil
}

// poisonReason is the park reason of a message that failed ParkAfter
// times (recording the quarantine first, under Quarantine or when the key
// is quarantined).
func (w *Worker) poisonReason(msg *Msg, herr error) (string, error) {
	if w.cfg.OnPoison == Quarantine || w.quarantines.get(membership.QuarantineKey(w.scope, msg.Key)) != nil {
		return w.quarantineKey(msg, herr)
	}
	return "failed " + strconv.Itoa(msg.Attempt) + " time(s)", nil
}
