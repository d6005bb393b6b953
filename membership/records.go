package membership

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/kvlease"
)

// A lane's record, <scope>.l.<lane> in the membership bucket, is both what
// inspect reads (who serves the lane, since when) and the lane's lock. An
// instance takes a lane with a compare-and-set write of the record, and
// only when the record is free (mayTake); it gives the lane back with
// another such write, after the ack of its last message. Two instances
// whose views of the membership differ for a while (one frozen, or slow to
// see a join) therefore never both hold a lane: the new owner waits for
// the old one's hand-over, or for the old one's lease to end, which the
// old one's fence has seen first.

// ErrClaimLost: a compare-and-set on the lane record failed: another
// instance holds the lane now.
var ErrClaimLost = errors.New("the lane was taken by another instance")

// Claim is a lane held by this instance under one membership epoch.
type Claim struct {
	Lane string
	Rec  LaneServer // as last written
	Rev  uint64     // the record's revision after that write
	// Prior is the record the take replaced (nil: none): whether the
	// lane was handed over (Released) or taken from a holder that may
	// still have had messages out.
	Prior *LaneServer
}

// MayTake decides whether instance self may take a lane whose record is
// rec (nil: none), given the live members and their epochs. It returns
// the instance that holds it otherwise.
//
// A lane is free when nobody recorded it, when its holder handed it over,
// when the holder is this instance (an earlier life of it: its lanes
// stopped when that epoch ended), when the holder is no longer a member
// (it left, or its lease ran out), or when the holder's current epoch is
// not the one it took the lane under (it lost its lease and joined again).
// A record without an epoch was written by an older lanes work, which
// holds the lane while it is a member.
func MayTake(rec *LaneServer, self string, members map[string]string) (bool, string) {
	switch {
	case rec == nil, rec.Released, rec.Instance == self:
		return true, ""
	}
	epoch, live := members[rec.Instance]
	if !live || rec.Epoch != "" && epoch != rec.Epoch {
		return true, ""
	}
	return false, rec.Instance
}

// Records reads and writes the lane records of one design (Scope) in a
// bucket.
type Records struct {
	JS    jetstream.JetStream
	KV    jetstream.KeyValue
	Scope string
}

// Key is a lane's record key.
func (r Records) Key(lane string) string { return r.Scope + ".l." + lane }

// Take makes one attempt to take lane for rec.Instance in rec.Epoch: it
// reads the record, decides with mayTake, and writes rec if the lane is
// free and the record did not change since the read. It returns the claim,
// or the holder when the lane is held (or was just taken by another).
func (r Records) Take(ctx context.Context, lane string, rec LaneServer, members map[string]string) (*Claim, string, error) {
	e, err := r.KV.Get(ctx, r.Key(lane))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e = nil
	case err != nil:
		return nil, "", err
	}
	return r.take(ctx, lane, e, rec, members)
}

// TakeKnown is Take from a record read earlier (e, nil: there was none;
// from Snapshot): no read first when the lane is free by it. Only a take
// trusts the earlier read: a record changed since makes the write fail,
// and a lane held by it may have been handed over since, so both are read
// again (Take).
func (r Records) TakeKnown(ctx context.Context, lane string, e jetstream.KeyValueEntry, rec LaneServer, members map[string]string) (*Claim, string, error) {
	c, _, err := r.take(ctx, lane, e, rec, members)
	if c == nil && err == nil {
		return r.Take(ctx, lane, rec, members)
	}
	return c, "", err
}

// conflicted is take's holder when its write found the record changed.
const conflicted = "another instance"

func (r Records) take(ctx context.Context, lane string, e jetstream.KeyValueEntry, rec LaneServer, members map[string]string) (*Claim, string, error) {
	var cur *LaneServer
	var rev uint64
	var err error
	switch {
	case e == nil || e.Operation() != jetstream.KeyValuePut:
	default:
		rev = e.Revision()
		cur = &LaneServer{}
		if json.Unmarshal(e.Value(), cur) != nil {
			cur = nil // unreadable: nobody can claim to hold it
		}
	}
	if ok, holder := MayTake(cur, rec.Instance, members); !ok {
		return nil, holder, nil
	}
	rec.Since = rec.Since.UTC()
	b, _ := json.Marshal(rec)
	if rev == 0 {
		rev, err = r.KV.Create(ctx, r.Key(lane), b)
	} else {
		rev, err = r.KV.Update(ctx, r.Key(lane), b, rev)
	}
	if kvlease.Conflict(err) {
		return nil, conflicted, nil
	}
	if err != nil {
		return nil, "", err
	}
	return &Claim{Lane: lane, Rec: rec, Rev: rev, Prior: cur}, "", nil
}

// Snapshot reads every lane record of the scope at once (the last value
// of each key, streamed by one watch), by lane: what an instance taking
// thousands of lanes reads instead of one request per lane (TakeKnown).
// A deleted record is absent.
func (r Records) Snapshot(ctx context.Context) (map[string]jetstream.KeyValueEntry, error) {
	w, err := r.KV.Watch(ctx, r.Scope+".l.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	prefix := r.Scope + ".l."
	out := map[string]jetstream.KeyValueEntry{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the record watch ended")
			}
			if e == nil {
				return out, nil // every record read
			}
			out[strings.TrimPrefix(e.Key(), prefix)] = e
		}
	}
}

// Update rewrites a held lane's record, only if it is still the one this
// instance wrote: ErrClaimLost otherwise. A write whose answer was lost
// (a reconnect) may have been applied: a record at another revision that
// this instance wrote under the same epoch is taken as its own.
func (r Records) Update(ctx context.Context, c *Claim, change func(*LaneServer)) error {
	rec := c.Rec
	change(&rec)
	b, _ := json.Marshal(rec)
	for try := 0; ; try++ {
		rev, err := r.KV.Update(ctx, r.Key(c.Lane), b, c.Rev)
		if err == nil {
			c.Rec, c.Rev = rec, rev
			return nil
		}
		if !kvlease.Conflict(err) {
			return err
		}
		e, gerr := r.KV.Get(ctx, r.Key(c.Lane))
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return gerr
		}
		var cur LaneServer
		if gerr != nil || json.Unmarshal(e.Value(), &cur) != nil || cur.Instance != c.Rec.Instance || cur.Epoch != c.Rec.Epoch || try > 0 {
			return ErrClaimLost
		}
		if string(e.Value()) == string(b) {
			c.Rec, c.Rev = rec, e.Revision()
			return nil
		}
		c.Rev = e.Revision()
	}
}

// DeletedLaneTTL is how long the record of a deleted lane is kept: where
// the lane was, should it have been deleted by hand (lanes apply
// --missing-lane-start recorded).
const DeletedLaneTTL = 7 * 24 * time.Hour

// Retire writes a deleted lane's last record, if this instance still
// holds it, with a TTL: records of the lanes a repartition deleted do not
// pile up.
func (r Records) Retire(c *Claim, change func(*LaneServer), timeout time.Duration) error {
	rec := c.Rec
	change(&rec)
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m := nats.NewMsg(kvlease.Subject(r.JS, r.KV.Bucket(), r.Key(c.Lane)))
	m.Data = b
	_, err := r.JS.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(c.Rev), jetstream.WithMsgTTL(DeletedLaneTTL))
	if kvlease.Conflict(err) {
		return ErrClaimLost
	}
	return err
}
