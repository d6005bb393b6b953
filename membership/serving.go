package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/jsapi"
)

// Member is an instance in the membership; its lease key holds it (less
// what ReadServing reads from the entry: Renewed, Expired).
type Member struct {
	Instance   string    `json:"instance"`
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Started    time.Time `json:"started"`
	DeadLetter string    `json:"dead_letter,omitempty"`
	// Renewed is when the lease was last renewed (live members), or when
	// the instance left or its lease expired (gone ones); read from the
	// bucket, not stored.
	Renewed time.Time `json:"renewed,omitzero"`
	// Expired: the lease ran out (the instance died or was cut off),
	// rather than the instance leaving on a stop.
	Expired bool `json:"expired,omitempty"`
	// Epoch names the life of the lease key this record was written for:
	// a new one at each join. Lanes are held under an epoch
	// (LaneServer.Epoch).
	Epoch string `json:"epoch,omitempty"`
}

// LaneServer is who serves a lane, as recorded by the instance that took it;
// it is also the lane record's stored value (without Gone), which is the
// lane's lock (see claim.go).
type LaneServer struct {
	Instance string    `json:"instance"`
	Since    time.Time `json:"since"`
	// Epoch is the membership epoch the instance took the lane under: the
	// lane is held while the instance's lease of that epoch lives.
	Epoch string `json:"epoch,omitempty"`
	// Released: the instance handed the lane over; whoever is next may
	// take it.
	Released bool `json:"released,omitempty"`
	// Gone: that instance no longer serves the lane (it handed it over,
	// or is no longer a member): the lane waits for another instance (a
	// lease, if it died) or for a worker to start.
	Gone bool `json:"gone,omitempty"`
	// DeadLetter is where that instance parks poison messages, if it does.
	DeadLetter string `json:"dead_letter,omitempty"`
	// Processed is the stream sequence of the last message of the lane
	// this instance acked, recorded every RecordEvery while it serves the
	// lane and when it hands it over: where the lane was at least (lanes
	// apply --missing-lane-start recorded).
	Processed uint64 `json:"processed_seq,omitempty"`
	// InFlight is a message that has run far longer than the lane's usual
	// processing time: recorded while it runs, cleared when it ends.
	InFlight *InFlight `json:"in_flight,omitempty"`
	// Outage: the lane's message waits because the handler could not run
	// at all (recorded at the first try that could not, cleared when it
	// runs or the message is given up).
	Outage *Outage `json:"outage,omitempty"`
	// Window is a key-parallel lane's window as its owner last recorded
	// it (every RecordEvery while it changes, and when it hands the lane
	// over): nil on a serial lane.
	Window *Window `json:"window,omitempty"`
}

// Window is what the owner of a key-parallel lane holds: the messages
// delivered to it and not yet settled, out of the lane's keys in flight.
type Window struct {
	Size int `json:"size"` // the lane's keys in flight (its max ack pending)
	// Held counts the messages out: running, waiting behind their key's
	// running or failed message, or failed and waiting for their
	// redelivery. Each holds one of the window's Size places.
	Held int `json:"held"`
	// Running names the keys with a message running (at most
	// WindowKeysNamed of them), RunningCount counts them all.
	Running      []string `json:"running,omitempty"`
	RunningCount int      `json:"running_count"`
	Keys         int      `json:"keys"` // distinct keys held
	// Oldest is the message that has waited longest for its key: nil
	// when nothing waits.
	Oldest *Waiting `json:"oldest,omitempty"`
	// Holder is a key whose messages fill the whole window: no other key
	// of the lane runs until it moves (a failing key on --on-poison
	// block).
	Holder string    `json:"holder,omitempty"`
	At     time.Time `json:"at"` // when it was recorded
}

// WindowKeysNamed bounds the running keys a Window names.
const WindowKeysNamed = 16

// Waiting is a message held back until its key's earlier one is settled.
type Waiting struct {
	Key   string    `json:"key"`
	Seq   uint64    `json:"seq"`
	Since time.Time `json:"since"` // delivered
}

// Outage: a lane's message waits because the handler could not run at
// all (a missing program, a refused connection).
type Outage struct {
	Since  time.Time `json:"since"`  // the first try that could not run
	Tries  int       `json:"tries"`  // tries that could not run so far
	Reason string    `json:"reason"` // the last one's error, one line
}

// InFlight is a message whose handler has run long.
type InFlight struct {
	Seq     uint64    `json:"seq"`
	Attempt int       `json:"attempt"`
	Since   time.Time `json:"since"` // when the handler started
	// Usual is the lane's usual processing time on this instance (a moving
	// average; zero when it had run nothing before).
	Usual time.Duration `json:"usual_ns,omitempty"`
}

// Serving is what the membership bucket says about a design's workers.
type Serving struct {
	Members []Member              `json:"members"`
	Gone    []Member              `json:"gone,omitempty"` // remembered for an hour
	Lanes   map[string]LaneServer `json:"lanes"`
	// Pauses are the records lanes pause wrote, by lane (a record may
	// outlive its pause: the server says whether the lane is paused).
	Pauses map[string]Pause `json:"pauses,omitempty"`
	// Quarantined are the keys lanes work quarantined (--on-poison
	// quarantine), by key.
	Quarantined map[string]Quarantine `json:"quarantined,omitempty"`
}

// ReadServing reads the membership of a design's workers: the live
// instances, those gone in the last hour, and per lane the instance that
// serves it and since when. With no bucket (no worker ever ran) it returns
// an empty Serving.
func ReadServing(ctx context.Context, js jetstream.JetStream, stream, design string) (*Serving, error) {
	out := &Serving{Lanes: map[string]LaneServer{}, Pauses: map[string]Pause{}, Quarantined: map[string]Quarantine{}}
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership bucket %s: %w", Bucket, err)
	}
	sc := Scope(stream, design)
	w, err := watch(ctx, kv, sc+".>", 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("reading the membership: %w", err)
	}
	defer w.Stop()
	live := map[string]bool{}
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reading the membership: %w", ctx.Err())
		case e = <-w.Updates():
		}
		if e == nil {
			break
		}
		key := strings.TrimPrefix(e.Key(), sc+".")
		switch {
		case strings.HasPrefix(key, "m."):
			var m Member
			if e.Operation() == jetstream.KeyValuePut {
				_ = json.Unmarshal(e.Value(), &m) // a memberRecord: Member's stored fields
			}
			m.Instance, m.Renewed = key[2:], e.Created()
			if e.Operation() == jetstream.KeyValuePut {
				out.Members = append(out.Members, m)
				live[m.Instance] = true
			} else {
				m.Expired = e.Operation() == jetstream.KeyValuePurge // a TTL marker
				out.Gone = append(out.Gone, m)
			}
		case strings.HasPrefix(key, "l.") && e.Operation() == jetstream.KeyValuePut:
			var ls LaneServer // stored as is (Gone, omitted, is decided below)
			if json.Unmarshal(e.Value(), &ls) == nil {
				out.Lanes[key[2:]] = ls
			}
		case strings.HasPrefix(key, "p.") && e.Operation() == jetstream.KeyValuePut:
			var p Pause
			if json.Unmarshal(e.Value(), &p) == nil {
				out.Pauses[key[2:]] = p
			}
		case strings.HasPrefix(key, "q."):
			if q, ok := quarantineOf(key, e); ok {
				out.Quarantined[q.Key] = q
			}
		}
	}
	for lane, ls := range out.Lanes {
		ls.Gone = !live[ls.Instance] || ls.Released
		out.Lanes[lane] = ls
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Instance < out.Members[j].Instance })
	sort.Slice(out.Gone, func(i, j int) bool { return out.Gone[i].Instance < out.Gone[j].Instance })
	return out, nil
}

// CountParked counts the messages stored on a dead-letter subject, and
// which stream stores them. ok is false when no stream stores the subject.
func CountParked(ctx context.Context, api *jsapi.Client, subject string) (count uint64, stream string, ok bool, err error) {
	stream, err = api.StreamBySubject(ctx, subject)
	if jsapi.IsStreamNotFound(err) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, err
	}
	subjects, err := api.Subjects(ctx, stream, subject)
	if err != nil {
		return 0, stream, false, fmt.Errorf("dead-letter stream %s: %w", stream, err)
	}
	return subjects[subject], stream, true, nil
}
