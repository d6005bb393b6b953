package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/planner"
)

// Rates fills each lane's delivered and acked rates from the change since
// prev, the report before it (watch mode). Deliveries count redeliveries
// too, as the consumer sequence does.
func Rates(prev, cur *Report) {
	if prev == nil || cur == nil {
		return
	}
	before := make(map[string]*Lane, len(prev.Lanes))
	for i := range prev.Lanes {
		before[prev.Lanes[i].Name] = &prev.Lanes[i]
	}
	cur.Interval = cur.Time.Sub(prev.Time)
	for i := range cur.Lanes {
		l := &cur.Lanes[i]
		p, ok := before[l.Name]
		if !ok || l.State != StateOK || p.State != StateOK {
			continue
		}
		// Each lane's figures carry the server's time: use it when both have it.
		dt := l.At.Sub(p.At).Seconds()
		if l.At.IsZero() || p.At.IsZero() || dt <= 0 {
			dt = cur.Interval.Seconds()
		}
		if dt <= 0 {
			continue
		}
		l.DeliveredRate = rate(p.DeliveredConsumer, l.DeliveredConsumer, dt)
		l.AckedRate = rate(p.AckFloorConsumer, l.AckFloorConsumer, dt)
	}
}

// rate is zero when a counter went backwards (the lane was recreated).
func rate(before, after uint64, seconds float64) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / seconds
}

// placementCodes are the findings of the placement check.
var placementCodes = map[string]bool{"misplaced": true, "unpartitioned": true, "retired": true, "placement_unchecked": true}

// CarryPlacement copies the placement findings of from (a read that ran
// the check) into to (a read that skipped it, MaxSubjects < 0): a watch
// reads the subject list once a minute, not every refresh.
func CarryPlacement(from, to *Report) {
	if from == nil || to == nil {
		return
	}
	for _, f := range from.Findings {
		if placementCodes[f.Code] {
			to.Findings = append(to.Findings, f)
		}
	}
	sortFindings(to.Findings)
	to.Summarize()
}

// KeyPlace is where one key's messages go under one layout.
type KeyPlace struct {
	Subject   string // as published
	Key       string
	Layout    Layout
	Partition int
	Stored    string   // the subject it is stored under
	Lanes     []string // the lanes that deliver it (one, unless there is an overlap)
}

// KeyError: a subject matches none of the stream's partition layouts.
type KeyError struct{ msg string }

func (e *KeyError) Error() string { return e.msg }

// ForKey answers where subject (as published) goes: a copy of the report
// with only the lanes that hold it, the findings about them and the
// stream-wide ones, and the places in Places.
func (r *Report) ForKey(subject string) (*Report, error) {
	places, err := r.Locate(subject)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range places {
		names = append(names, p.Lanes...)
	}
	out := r.Only(names...)
	out.Places = places
	return out, nil
}

// Locate answers "which lane holds this key" for a published subject (or a
// bare key, when the mapping source has one '*'), under
// every layout the report knows (two during a repartition: old messages
// drain from the old lane while new ones wait in the new one). An error (a
// *KeyError) says that the subject matches no layout.
func (r *Report) Locate(subject string) ([]KeyPlace, error) {
	var out []KeyPlace
	var sources []string
	for _, lay := range r.Layouts {
		parsed, err := planner.ParseLayout(lay.Source, lay.Destination)
		if err != nil {
			continue
		}
		sources = append(sources, lay.Source)
		subject := subject
		if parsed.IsBareKey([]byte(subject)) { // alice for msgs.received_from.*, as plan --key takes it
			subject = string(parsed.AppendBareKey(nil, []byte(subject)))
		}
		p, ok := parsed.PartitionOf([]byte(subject))
		if !ok {
			continue
		}
		stored, _ := parsed.Transform(subject)
		kp := KeyPlace{Subject: subject, Key: parsed.Key([]byte(subject)), Layout: lay, Partition: p, Stored: stored}
		filter := parsed.Filter(p)
		for _, l := range r.Lanes {
			if l.Filter == filter || l.Filter == "" && l.Partitions == lay.Partitions && l.Partition == p {
				kp.Lanes = append(kp.Lanes, l.Name)
			}
		}
		out = append(out, kp)
	}
	if len(out) == 0 {
		if len(sources) == 0 {
			return nil, &KeyError{fmt.Sprintf("stream %s has no partition mapping inspect can read: give the design with -f", r.Stream)}
		}
		return nil, &KeyError{fmt.Sprintf("%q does not match the mapping source %v of stream %s", subject, sources, r.Stream)}
	}
	return out, nil
}

// Turn is one refresh of a watch: a report, or why there is none this time.
type Turn struct {
	At     time.Time
	Report *Report // nil when Err says why
	// Last is the latest report read (this one, or one before a problem),
	// for a screen that keeps showing figures while it reconnects.
	Last *Report
	// Err is why this turn has no report: a *DisconnectedError, or the
	// read's error. The next turn tries again.
	Err error
}

// DisconnectedError: the connection is down; the client reconnects by itself.
type DisconnectedError struct {
	Server string
	Status string // the client's connection state, e.g. "reconnecting"
}

func (e *DisconnectedError) Error() string {
	return fmt.Sprintf("lost the connection to %s; reconnecting (%s)", e.Server, e.Status)
}

// placementEvery is how often a watch reads the stream's subject list.
const placementEvery = time.Minute

// Watch inspects the stream every interval until ctx ends, and hands each
// turn, with rates from the turn before, to show; an error from show ends
// the watch with it. A watch outlives what it can: JetStream that does not
// answer yet (a cluster without a leader, a timeout), a lost connection or
// a failed read is a turn with Err, retried on the next one; only a wrong
// setting, credentials or permissions end it at the start. The stream's
// subject list (placement check) is read once a minute; the turns between
// carry its findings. The end of ctx ends the watch without an error.
func Watch(ctx context.Context, conn *connect.Conn, o Options, every time.Duration, show func(Turn) error) error {
	if err := conn.CheckJetStream(ctx); err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) || (ce.Kind != connect.KindTimeout && ce.Kind != connect.KindUnavailable) {
			return err
		}
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last, placed *Report
	for {
		ro := o
		checkPlacement := placed == nil || time.Since(placed.Time) >= placementEvery
		if !checkPlacement {
			ro.MaxSubjects = -1
		}
		r, err := watchRead(ctx, conn, ro, every)
		if ctx.Err() != nil {
			return nil
		}
		if r != nil {
			if checkPlacement {
				placed = r
			} else {
				CarryPlacement(placed, r)
			}
			Rates(last, r)
			last = r
		}
		if err := show(Turn{At: time.Now(), Report: r, Last: last, Err: err}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watchRead inspects once, failing fast: no request while disconnected,
// and the whole read bounded by the interval (or the request timeout).
func watchRead(ctx context.Context, conn *connect.Conn, o Options, every time.Duration) (*Report, error) {
	if st := conn.NC.Status(); st != nats.CONNECTED {
		return nil, &DisconnectedError{Server: conn.Server, Status: strings.ToLower(st.String())}
	}
	rctx, cancel := context.WithTimeout(ctx, max(every, conn.Timeout))
	defer cancel()
	r, err := Inspect(rctx, conn, o)
	if err != nil {
		return nil, conn.Diagnose(ctx, err)
	}
	return r, nil
}
