package actions

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
	"github.com/lanes-dev/lanes/work"
)

// ReplayOptions say how to replay.
type ReplayOptions struct {
	DryRun bool
	// OutOfOrder replays the messages of keys that moved on: they then
	// run after messages of their key that came later.
	OutOfOrder bool
}

// KeyOrder is a key whose parked messages would run out of order if
// replayed, and why.
type KeyOrder struct {
	Key    string   `json:"key"`
	Parked []uint64 `json:"parked"` // the parked messages' own sequences
	// Later is a message of the key the stream holds after the parked
	// ones (processed, or waiting): the replayed copies would run after
	// it. 0 when the reason is another.
	Later uint64 `json:"later_seq,omitempty"`
	Why   string `json:"why"`
}

// replayKey is one key's parked messages to replay, in order, and what
// the stream says about the key.
type replayKey struct {
	key     string
	msgs    []ParkedMsg       // by the sequence each first had
	subject string            // where to publish: the subject as published
	copies  map[uint64]uint64 // parked seq -> its replayed copy's seq, from an earlier run
	order   *KeyOrder
	// replayID marks the copies of a quarantined key's replay (header
	// Lanes-Replay-Id): workers run those, and park the key's others.
	replayID string
}

// ReplayParked publishes the chosen parked messages again to their
// design's subject, key by key in the order they first had, and deletes
// each parked message once the stream has acknowledged its copy. The copy
// keeps the payload and headers, with Lanes-Replayed-From-Stream and -Seq,
// and the message ID lanes-replay:<stream>:<origin seq>: a re-run after a
// kill (or a second operator) finds the copy in the stream, or the stream
// drops it as a duplicate within its duplicate window, and only deletes.
//
// A key that moved on (the stream holds a message of it after its parked
// ones, which ran or will run first) is refused unless OutOfOrder, before
// anything is published; so is a key with an earlier parked message left
// out, and a key whose later messages the stream may no longer hold.
//
// A quarantined key the choice covers (named, one of its parked messages
// chosen, or All) is replayed whole by its own protocol, in rounds, and
// then lifted (quarantine.go): its later messages were parked by the
// quarantine, so they are no reason to refuse.
func ReplayParked(ctx context.Context, c *connect.Conn, sel *Selection, f ParkedFilter, o ReplayOptions) (*ParkedOutcome, error) {
	if err := f.mustNarrow(sel, "replay"); err != nil {
		return nil, err
	}
	p, err := ReadParked(ctx, c, sel, f)
	if err != nil {
		return nil, err
	}
	out := &ParkedOutcome{Action: "replay", Stream: p.Stream, Design: p.Design, DryRun: o.DryRun}
	api := jsapi.New(c)
	info, err := api.StreamInfo(ctx, p.Stream)
	if err != nil {
		return nil, err
	}
	// A quarantined key's messages parked since its first failure are
	// replayed by its own protocol, which lifts the quarantine (quarantine.go).
	quarantined := quarantinesOf(sel, f, p)
	ordinary := *p
	ordinary.Messages = slices.DeleteFunc(slices.Clone(p.Messages), func(m ParkedMsg) bool { return quarantinedOnly(m, quarantined) })
	keys, err := planReplay(ctx, api, sel, &ordinary, info)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.order != nil {
			out.OutOfOrder = append(out.OutOfOrder, *k.order)
		}
	}
	if len(out.OutOfOrder) > 0 && !o.OutOfOrder {
		for _, k := range keys {
			for _, m := range k.msgs {
				done := "would replay"
				if k.order != nil {
					done = "refused: out of order"
				}
				out.add(ParkedChange{ParkedMsg: m, Done: done})
			}
		}
		return out, refusedf("%s; replay with --out-of-order to replay them anyway, or leave those keys out (--key, --seq)", outOfOrderText(out.OutOfOrder))
	}
	for _, k := range keys {
		for _, m := range k.msgs {
			ch := ParkedChange{ParkedMsg: m, Changed: true, Done: "would replay to " + k.subject}
			if s, ok := k.copies[m.Seq]; ok {
				ch.Done, ch.NewSeq = fmt.Sprintf("replayed as sequence %d already; would delete the parked message", s), s
			}
			if !o.DryRun {
				if err := replayOne(ctx, c, api, k, &ch); err != nil {
					return out, err
				}
			}
			out.add(ch)
		}
	}
	for _, q := range quarantined {
		l, err := newLifter(ctx, c, sel, f, info, q, out)
		if err != nil {
			return out, err
		}
		if o.DryRun {
			err = l.dryRun(ctx)
		} else {
			err = l.run(ctx)
		}
		out.Quarantines = append(out.Quarantines, l.lift)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// replayOne publishes a parked message's copy (unless an earlier run did)
// and then deletes the parked message.
func replayOne(ctx context.Context, c *connect.Conn, api *jsapi.Client, k *replayKey, ch *ParkedChange) error {
	m := ch.ParkedMsg
	seq, done := k.copies[m.Seq]
	if !done {
		pctx, cancel := context.WithTimeout(ctx, c.Timeout)
		ack, err := c.JS.PublishMsg(pctx, replayCopy(m, k.subject, k.replayID))
		cancel()
		if err != nil {
			return fmt.Errorf("replaying parked message %d (key %s) to %s: %w; nothing was deleted: run the replay again", m.Seq, planner.Quote(m.Key, 100), k.subject, err)
		}
		if ack.Stream != m.Stream {
			return fmt.Errorf("the copy of parked message %d went to stream %s (sequence %d), not %s: %s is stored there; the parked message is kept", m.Seq, ack.Stream, ack.Sequence, m.Stream, k.subject)
		}
		seq = ack.Sequence
	}
	gone, err := deleteMsg(ctx, api, m.DLStream, m.Seq)
	if err != nil {
		return fmt.Errorf("parked message %d was replayed (sequence %d) but is not deleted: %w; run the replay again to delete it", m.Seq, seq, err)
	}
	ch.NewSeq = seq
	switch {
	case done || gone:
		ch.Done = fmt.Sprintf("replayed as sequence %d (already)", seq)
		ch.Changed = !gone
	default:
		ch.Done = fmt.Sprintf("replayed as sequence %d", seq)
	}
	return nil
}

// replayID is the copy's message ID: one per park (the parked message's
// origin sequence is the position that was parked).
func replayID(m ParkedMsg) string {
	return "lanes-replay:" + m.Stream + ":" + strconv.FormatUint(m.OriginSeq, 10)
}

// replayCopy is the message published again: the parked one's payload and
// headers (not the server's Nats-*), the sequence it first had, its ID,
// and a quarantined key's replay ID.
func replayCopy(m ParkedMsg, subject, id string) *nats.Msg {
	out := nats.NewMsg(subject)
	out.Data = m.Data
	for k, v := range m.Header {
		if !strings.HasPrefix(k, "Nats-") {
			out.Header[k] = v
		}
	}
	out.Header.Del(work.HeaderReplayID) // an earlier replay's
	if id != "" {
		out.Header.Set(work.HeaderReplayID, id)
	}
	out.Header.Set(HeaderReplayedFromStream, m.Stream)
	out.Header.Set(HeaderReplayedFromSeq, strconv.FormatUint(m.First(), 10))
	out.Header.Set(jetstream.MsgIDHeader, replayID(m))
	return out
}

// planReplay groups the chosen messages by key in the order they first
// had, finds where each key is published, and what the stream holds of
// the key after its parked messages: copies from an earlier run, and
// messages that would run before the replayed ones.
func planReplay(ctx context.Context, api *jsapi.Client, sel *Selection, p *Parked, info *jetstream.StreamInfo) ([]*replayKey, error) {
	msgs := slices.Clone(p.Messages)
	byOrigin(msgs)
	var keys []*replayKey
	for _, m := range msgs {
		if len(keys) == 0 || keys[len(keys)-1].key != m.Key {
			keys = append(keys, &replayKey{key: m.Key, copies: map[uint64]uint64{}})
		}
		k := keys[len(keys)-1]
		k.msgs = append(k.msgs, m)
	}
	for _, k := range keys {
		subject, stored, err := subjectsOf(sel, k.msgs[0])
		if err != nil {
			return nil, err
		}
		for _, m := range k.msgs[1:] {
			if s, _, err := subjectsOf(sel, m); err != nil || s != subject {
				return nil, refusedf("key %s: its parked messages %d and %d were published to different subjects (%s, %s): replay them one by one (--seq)", planner.Quote(k.key, 100), k.msgs[0].Seq, m.Seq, subject, s)
			}
		}
		k.subject = subject
		if err := k.check(ctx, api, p, stored, info); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// subjectsOf is where a parked message was published (its stored subject
// read back through the stream's layouts), and where its key is stored in
// each layout: its lanes of every generation.
func subjectsOf(sel *Selection, m ParkedMsg) (string, []string, error) {
	var subject string
	for _, lay := range sel.Report.Layouts {
		parsed, err := planner.ParseLayout(lay.Source, lay.Destination)
		if err != nil {
			continue
		}
		if s, ok := parsed.Unmap(m.Subject); ok {
			subject = s
			break
		}
	}
	if subject == "" {
		return "", nil, refusedf("parked message %d: its subject %s fits none of stream %s's layouts, so lanes cannot tell where to publish it again", m.Seq, planner.Quote(m.Subject, 200), m.Stream)
	}
	var stored []string
	for _, lay := range sel.Report.Layouts {
		parsed, err := planner.ParseLayout(lay.Source, lay.Destination)
		if err != nil {
			continue
		}
		if s, ok := keyFilter(parsed, subject); ok && !slices.Contains(stored, s) {
			stored = append(stored, s)
		}
	}
	return subject, stored, nil
}

// keyFilter is where a layout stores the key of subject: its stored
// subject with the tokens that are not the key's as wildcards (a key can
// be published on several subjects: orders.alice.created, .paid).
func keyFilter(l *planner.Layout, subject string) (string, bool) {
	const marker = "\x01lanes-any\x01" // a token no subject has
	toks := strings.Split(subject, ".")
	src := strings.Split(l.Source, ".")
	if len(toks) != len(src) {
		return "", false
	}
	w := 0
	for i, t := range src {
		if t != "*" {
			continue
		}
		w++
		if !slices.Contains(l.KeyTokens, w) {
			toks[i] = marker
		}
	}
	stored, ok := l.Transform(strings.Join(toks, "."))
	if !ok {
		return "", false
	}
	out := strings.Split(stored, ".")
	for i, t := range out {
		if t == marker {
			out[i] = "*"
		}
	}
	return strings.Join(out, "."), true
}

// check reads what the stream holds of the key after its first parked
// message, on every layout's subject of the key: copies an earlier run
// published (by their message ID), and messages that would run before the
// copies (the key moved on). Parked messages' own origins and copies of
// messages that came before are no such messages.
func (k *replayKey) check(ctx context.Context, api *jsapi.Client, p *Parked, stored []string, info *jetstream.StreamInfo) error {
	from, first := k.msgs[0].OriginSeq, k.msgs[0].First()
	ids := map[string]uint64{}
	parkedSeqs := make([]uint64, len(k.msgs))
	for i, m := range k.msgs {
		from = min(from, m.OriginSeq)
		ids[replayID(m)] = m.Seq
		parkedSeqs[i] = m.Seq
	}
	last := k.msgs[len(k.msgs)-1].First()
	origins := map[uint64]bool{}
	for _, m := range p.all {
		if m.Key != k.key {
			continue
		}
		origins[m.OriginSeq] = true
		if m.First() < last && !slices.ContainsFunc(k.msgs, func(x ParkedMsg) bool { return x.Seq == m.Seq }) {
			k.setOrder(KeyOrder{Why: fmt.Sprintf("its earlier parked message %d (sequence %d) stays parked", m.Seq, m.First())}, parkedSeqs)
		}
	}
	switch {
	case info.Config.Retention != jetstream.LimitsPolicy:
		k.setOrder(KeyOrder{Why: fmt.Sprintf("stream %s deletes processed messages (%s retention), so lanes cannot tell whether the key moved on since sequence %d", info.Config.Name, strings.ToLower(info.Config.Retention.String()), from)}, parkedSeqs)
	case info.State.FirstSeq > from+1:
		k.setOrder(KeyOrder{Why: fmt.Sprintf("stream %s no longer holds its messages after sequence %d (it starts at %d), so lanes cannot tell whether the key moved on", info.Config.Name, from, info.State.FirstSeq)}, parkedSeqs)
	}
	for _, subject := range stored {
		for seq := from + 1; ; {
			m, err := getMsg(ctx, api, info.Config.Name, seq, subject)
			if jsapi.IsMessageNotFound(err) {
				break
			}
			if err != nil {
				return fmt.Errorf("reading key %s's messages on stream %s: %w", planner.Quote(k.key, 100), info.Config.Name, err)
			}
			seq = m.Seq + 1
			if parked, ok := ids[m.Header.Get(jetstream.MsgIDHeader)]; ok {
				k.copies[parked] = m.Seq
				continue
			}
			if origins[m.Seq] {
				continue
			}
			if o, err := strconv.ParseUint(m.Header.Get(HeaderReplayedFromSeq), 10, 64); err == nil && o < first {
				continue // a copy of a message that came before: in order
			}
			k.setOrder(KeyOrder{Later: m.Seq, Why: fmt.Sprintf("the stream holds its message %d, published after the parked ones", m.Seq)}, parkedSeqs)
		}
	}
	return nil
}

// setOrder keeps the key's first reason to refuse.
func (k *replayKey) setOrder(o KeyOrder, parked []uint64) {
	if k.order == nil {
		o.Key, o.Parked = k.key, parked
		k.order = &o
	}
}

// outOfOrderText names the keys that moved on (a few, then how many).
func outOfOrderText(keys []KeyOrder) string {
	var parts []string
	for i, k := range keys {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("key %s: %s", planner.Quote(k.Key, 100), k.Why))
	}
	return fmt.Sprintf("%d key(s) may run out of order if replayed (%s)", len(keys), strings.Join(parts, "; "))
}
