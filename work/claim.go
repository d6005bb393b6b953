package work

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
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

// errClaimLost: a compare-and-set on the lane record failed: another
// instance holds the lane now.
var errClaimLost = errors.New("the lane was taken by another instance")

// claim is a lane held by this instance under one membership epoch.
type claim struct {
	lane string
	rec  LaneServer // as last written
	rev  uint64     // the record's revision after that write
}

// mayTake decides whether instance self may take a lane whose record is
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
func mayTake(rec *LaneServer, self string, members map[string]string) (bool, string) {
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

// laneRecords reads and writes the lane records of one design.
type laneRecords struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	scope string
}

func (r laneRecords) key(lane string) string { return r.scope + ".l." + lane }

// take makes one attempt to take lane for rec.Instance in rec.Epoch: it
// reads the record, decides with mayTake, and writes rec if the lane is
// free and the record did not change since the read. It returns the claim,
// or the holder when the lane is held (or was just taken by another).
func (r laneRecords) take(ctx context.Context, lane string, rec LaneServer, members map[string]string) (*claim, string, error) {
	var cur *LaneServer
	var rev uint64
	e, err := r.kv.Get(ctx, r.key(lane))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, "", err
	default:
		rev = e.Revision()
		cur = &LaneServer{}
		if json.Unmarshal(e.Value(), cur) != nil {
			cur = nil // unreadable: nobody can claim to hold it
		}
	}
	if ok, holder := mayTake(cur, rec.Instance, members); !ok {
		return nil, holder, nil
	}
	rec.Since = rec.Since.UTC()
	b, _ := json.Marshal(rec)
	if rev == 0 {
		rev, err = r.kv.Create(ctx, r.key(lane), b)
	} else {
		rev, err = r.kv.Update(ctx, r.key(lane), b, rev)
	}
	if conflict(err) {
		return nil, "another instance", nil
	}
	if err != nil {
		return nil, "", err
	}
	return &claim{lane: lane, rec: rec, rev: rev}, "", nil
}

// update rewrites a held lane's record, only if it is still the one this
// instance wrote: errClaimLost otherwise. A write whose answer was lost
// (a reconnect) may have been applied: a record at another revision that
// this instance wrote under the same epoch is taken as its own.
func (r laneRecords) update(ctx context.Context, c *claim, change func(*LaneServer)) error {
	rec := c.rec
	change(&rec)
	b, _ := json.Marshal(rec)
	for try := 0; ; try++ {
		rev, err := r.kv.Update(ctx, r.key(c.lane), b, c.rev)
		if err == nil {
			c.rec, c.rev = rec, rev
			return nil
		}
		if !conflict(err) {
			return err
		}
		e, gerr := r.kv.Get(ctx, r.key(c.lane))
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return gerr
		}
		var cur LaneServer
		if gerr != nil || json.Unmarshal(e.Value(), &cur) != nil || cur.Instance != c.rec.Instance || cur.Epoch != c.rec.Epoch || try > 0 {
			return errClaimLost
		}
		if string(e.Value()) == string(b) {
			c.rec, c.rev = rec, e.Revision()
			return nil
		}
		c.rev = e.Revision()
	}
}

// deletedLaneTTL is how long the record of a deleted lane is kept: where
// the lane was, should it have been deleted by hand (lanes apply
// --missing-lane-start recorded).
const deletedLaneTTL = 7 * 24 * time.Hour

// retire writes a deleted lane's last record, if this instance still
// holds it, with a TTL: records of the lanes a repartition deleted do not
// pile up.
func (r laneRecords) retire(c *claim, change func(*LaneServer), timeout time.Duration) error {
	rec := c.rec
	change(&rec)
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m := nats.NewMsg("$KV." + r.kv.Bucket() + "." + r.key(c.lane))
	m.Data = b
	_, err := r.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(c.rev), jetstream.WithMsgTTL(deletedLaneTTL))
	if conflict(err) {
		return errClaimLost
	}
	return err
}

func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || jsapi.IsWrongLastSequence(err)
}

// claimRetry is how often a lane waiting for its holder reads the record
// again when no watch event woke it (a missed event must not strand it).
const claimRetry = 2 * time.Second
