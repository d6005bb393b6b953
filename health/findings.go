package health

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// serverDefaultMaxConsumers is nats-server's default cap on consumers per
// stream when neither the stream nor the account sets one.
const serverDefaultMaxConsumers = 1000

// defaultAckWait is the server's ack wait when a consumer sets none.
const defaultAckWait = 30 * time.Second

// judgeLanes records the faults each lane has on its own.
func (j *judge) judgeLanes() {
	for i := range j.report.Lanes {
		l := &j.report.Lanes[i]
		if l.State != StateOK {
			continue
		}
		j.order(l)
		j.timings(l)
		j.head(l)
		if !j.instanceGone(l) { // one fact: nobody serves the lane
			j.idle(l)
		}
		j.longRunning(l)
		j.handlerOutage(l)
		j.keyWindow(l)
		j.pause(l)
		if p, ok := j.mismatched[l.Name]; ok {
			j.add(Finding{Severity: Warning, Code: "metadata_mismatch", Lane: l.Name,
				Message: fmt.Sprintf("lane %s is tagged as partition %d but its filter %s covers partition %d", l.Name, l.Partition, l.Filter, p),
				Advice:  "re-apply the design so the lane's metadata and filter agree (tools that trust the metadata will misreport it)"})
		}
	}
}

// order: a lane must deliver one message at a time and learn of its end;
// a key-parallel lane (its tag says keys in flight K) lets K out, one per
// key, which lanes work gates, and needs its pinned group.
func (j *judge) order(l *Lane) {
	switch {
	case l.MaxAckPending > 1 && !l.KeyParallel():
		j.add(Finding{Severity: Critical, Code: "max_ack_pending", Lane: l.Name,
			Message: fmt.Sprintf("lane %s lets %d messages out at once (max ack pending %d): its keys are not processed in order", l.Name, l.MaxAckPending, l.MaxAckPending),
			Advice:  "set max ack pending to 1 (the design default); it can be changed on the live lane with lanes apply; to run several keys of a lane at once in order, use lane.keys_in_flight with lanes work"})
	case l.KeyParallel() && l.MaxAckPending != l.KeysInFlight:
		j.add(Finding{Severity: Warning, Code: "keys_in_flight_mismatch", Lane: l.Name,
			Message: fmt.Sprintf("lane %s is tagged with %d keys in flight (lanes.keys_in_flight) but its max ack pending is %d: it was changed outside lanes apply, and the server's window is not the one lanes work runs", l.Name, l.KeysInFlight, l.MaxAckPending),
			Advice:  fmt.Sprintf("re-apply the design (lanes apply sets max ack pending back to %d, in place), or change lane.keys_in_flight in the design and apply that", l.KeysInFlight)})
	}
	if l.KeyParallel() && l.PinnedTTL == 0 {
		j.add(Finding{Severity: Warning, Code: "keys_in_flight_unpinned", Lane: l.Name,
			Message: fmt.Sprintf("key-parallel lane %s (%d keys in flight) has no pinned-client priority group: the server delivers to any worker that pulls, so two instances that both believe they own the lane could run one key's messages at once", l.Name, l.KeysInFlight),
			Advice:  "re-apply the design: lanes apply gives every key-parallel lane its pinned group, in place"})
	}
	if l.AckPolicy == "none" {
		j.add(Finding{Severity: Critical, Code: "ack_none", Lane: l.Name,
			Message: fmt.Sprintf("lane %s does not wait for acks (ack policy none): the next message is out before the last is done, and a crash loses it", l.Name),
			Advice:  "recreate the lane with ack policy explicit (the server does not allow changing it in place)"})
	}
}

// timings: settings that contradict each other or lose the lane.
func (j *judge) timings(l *Lane) {
	// A key-parallel lane is pinned for its fence, not for failover: only
	// lanes work serves it, and lanes work unpins a lane it takes (its
	// pin check), so the pin's TTL does not delay a take-over.
	if l.PinnedTTL > 0 && l.AckWait < l.PinnedTTL && !l.KeyParallel() {
		j.add(Finding{Severity: Warning, Code: "ack_wait_below_pinned_ttl", Lane: l.Name,
			Message: fmt.Sprintf("lane %s has ack wait %s, shorter than its pinned TTL %s: when the pinned worker dies, its message waits for the pin to move, not for the ack wait", l.Name, fmtDuration(l.AckWait), fmtDuration(l.PinnedTTL)),
			Advice:  "make ack wait at least the pinned TTL, or lower the pinned TTL, so failover time is what the settings say"})
	}
	if l.Durable && l.InactiveThreshold > 0 {
		j.add(Finding{Severity: Warning, Code: "inactive_threshold", Lane: l.Name,
			Message: fmt.Sprintf("lane %s is deleted by the server after %s without pulls (inactive threshold), losing its position", l.Name, fmtDuration(l.InactiveThreshold)),
			Advice:  "remove the inactive threshold: a lane must outlive idle workers"})
	}
}

// head judges the message a lane waits on. Not every ack pending message
// is stuck: one that used up max deliver is dropped lazily, on the next pull.
func (j *judge) head(l *Lane) {
	if l.AckPending == 0 {
		if l.Redelivered > 0 && l.MaxDeliver > 0 {
			// Redelivered counts unacknowledged messages; with nothing out,
			// these are messages that used up max deliver and were skipped.
			j.add(Finding{Severity: Warning, Code: "skipped", Lane: l.Name,
				Message: fmt.Sprintf("lane %s skipped %d message(s) that used up max deliver (%d): their keys went on without them", l.Name, l.Redelivered, l.MaxDeliver),
				Advice:  fmt.Sprintf("find them in the MAX_DELIVERIES advisories ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s) and replay or discard them deliberately", j.report.Stream, l.Name)})
		}
		return
	}
	head := headText(l)
	d := l.HeadDeliveries
	poison := false // a finding already says the head keeps failing
	switch {
	case l.MaxDeliver > 0 && d >= l.MaxDeliver:
		j.add(Finding{Severity: Warning, Code: "max_deliver_reached", Lane: l.Name,
			Message: fmt.Sprintf("lane %s: %s was delivered %d times, its max deliver; the server drops it at the next pull (lazily), so the lane is not stuck, but the message leaves its key's order", l.Name, head, d),
			Advice:  "let a worker pull to move the lane on; handle the message from the MAX_DELIVERIES advisory deliberately"})
		return
	case l.MaxDeliver > 0 && d >= 2 && d >= l.MaxDeliver-1:
		poison = true
		j.add(Finding{Severity: Critical, Code: "near_max_deliver", Lane: l.Name,
			Message: fmt.Sprintf("lane %s: %s was delivered %d of %d times: one more failure and it is dropped, out of its key's order", l.Name, head, d, l.MaxDeliver),
			Advice:  "fix the handler for this message (a poison message) or +TERM it deliberately; raise max deliver to buy time"})
	case d >= 3:
		poison = true
		j.add(Finding{Severity: Warning, Code: "redelivered", Lane: l.Name,
			Message: fmt.Sprintf("lane %s: %s was delivered %d times: the workers keep failing on it, and its lane waits (a poison message)", l.Name, head, d),
			Advice:  "read the workers' errors for this message; fix it or +TERM it: the lane stays blocked until it is acked"})
	case l.MaxAckPending > 1 && l.Redelivered > 0 && !l.KeyParallel():
		// A key-parallel lane's redeliveries are its failing keys': its
		// window says which (keyWindow).
		j.add(Finding{Severity: Warning, Code: "redelivered", Lane: l.Name,
			Message: fmt.Sprintf("lane %s has %d message(s) being redelivered", l.Name, l.Redelivered),
			Advice:  "read the workers' errors: messages that fail repeatedly block their keys"})
	}
	if age, ok := l.AckAge(); ok && l.AckWait > 0 && age > l.AckWait && !poison {
		j.add(stuckFinding(l, head, age))
	}
}

// stuckFinding: the head has been out longer than the ack wait with no
// new delivery. What it means depends on the evidence, and the words say
// only what the evidence shows: inspect cannot see in-progress acks
// (+WPI) nor a nak's delay, only deliveries and pulls.
func stuckFinding(l *Lane, head string, age time.Duration) Finding {
	f := Finding{Severity: Critical, Code: "stuck", Lane: l.Name,
		Message: fmt.Sprintf("lane %s is stuck: %s has been out for %s, longer than the ack wait (%s)", l.Name, head, fmtDuration(age), fmtDuration(l.AckWait))}
	srv := l.Server
	switch {
	case l.HeadDeliveries >= 2 || l.HeadDeliveries == 0 && l.Redelivered > 0:
		// Delivered before: a worker rejected it (a nak, with a delay or a
		// backoff) or let its ack wait pass; it waits for its redelivery.
		f.Severity = Warning
		f.Message = fmt.Sprintf("lane %s waits: %s was delivered %s and is not acked; the last delivery was %s ago, longer than the ack wait (%s): a worker rejected it (nak) or its attempt timed out, and it waits for its redelivery (a nak's delay or the lane's backoff)",
			l.Name, head, timesText(l.HeadDeliveries), fmtDuration(age), fmtDuration(l.AckWait))
		f.Advice = "read the workers' errors for this message (lanes work logs each failure and its next retry); fix it or +TERM it, or let lanes work --on-poison park set it aside"
	case srv != nil && srv.Gone:
		f.Message += fmt.Sprintf(", and the instance that served the lane, %s, is gone", srv.Instance)
		f.Advice = "the instance holding it died or was cut off: the message is redelivered after its ack wait to the instance that takes the lane; start lanes work if none runs"
	case srv != nil:
		f.Message += fmt.Sprintf("; the lane is served by live instance %s", srv.Instance)
		f.Advice = "a long job keeps its message with in-progress acks (+WPI), which inspect cannot see; if it should be done, look for a hung handler on " + srv.Instance + " (--max-process-time bounds it)"
	case l.Waiting > 0:
		f.Advice = "a worker holds it without acking: look for a hung handler; long work should send +WPI (in progress) to keep its claim"
	default:
		f.Message += ", and no worker is pulling"
		f.Advice = "the worker that took it has likely died (no pull waits, and no lanes work instance records the lane): start a worker on this lane; the message is redelivered on its first pull"
	}
	return f
}

func timesText(d int) string {
	if d >= 2 {
		return fmt.Sprintf("%d times", d)
	}
	return "more than once"
}

// takeOverGrace is how long the live instances of a design have to take
// the lanes of one that died (the lease, 5s by default, is when they
// see it; a rebalance is at once) before inspect reports the lanes as
// unserved.
const takeOverGrace = 10 * time.Second

// instanceGone: the lanes work instance that served the lane is gone, and
// no other took it. A lane whose instance stopped (SIGTERM, scaled to
// zero) is intended; one whose lease expired is a death or a cut. It
// returns whether it reported the lane.
func (j *judge) instanceGone(l *Lane) bool {
	srv := l.Server
	if srv == nil || !srv.Gone || srv.Released || !srv.Expired && !srv.GoneAt.IsZero() {
		return false
	}
	var live []string
	if w := j.report.WorkersOf(l.Design); w != nil {
		for _, m := range w.Live {
			live = append(live, m.Instance)
		}
	}
	when := "is no longer a member (gone more than an hour ago)"
	if !srv.GoneAt.IsZero() {
		ago := nonNegative(l.At.Sub(srv.GoneAt))
		if len(live) > 0 && ago < takeOverGrace {
			return false // the others are taking the lane over
		}
		when = fmt.Sprintf("lost its lease %s ago (it died or is cut off from NATS)", fmtDuration(ago))
	}
	f := Finding{Severity: Warning, Code: "instance_gone", Lane: l.Name,
		Message: fmt.Sprintf("lane %s was served by lanes work instance %s, which %s, and no live instance has taken it", l.Name, srv.Instance, when)}
	if l.Backlog > 0 {
		f.Severity = Critical
		f.Message += fmt.Sprintf(": %d message(s) wait", l.Backlog)
	}
	if len(live) > 0 {
		f.Advice = fmt.Sprintf("live instances of design %s (%s) have not taken it: read their logs (a lane they refuse is logged) and check their connection", l.Design, strings.Join(live, ", "))
	} else {
		f.Advice = fmt.Sprintf("no instance of design %s is alive: start lanes work (it takes the lane at once), and find out why %s stopped renewing (killed, host down, network cut)", l.Design, srv.Instance)
	}
	j.add(f)
	return true
}

// longRunning: lanes work records a message that has run far longer than
// its lane's usual processing time. A hung handler is otherwise invisible:
// its in-progress acks restart the ack wait, and they look like
// deliveries.
func (j *judge) longRunning(l *Lane) {
	srv := l.Server
	if srv == nil || srv.Gone || srv.Running == nil {
		return
	}
	in := srv.Running
	usual := "no earlier message to compare with"
	if in.Usual > 0 {
		usual = "the lane's usual processing time is " + fmtDuration(in.Usual)
	}
	attempt := ""
	if in.Attempt > 1 {
		attempt = fmt.Sprintf(", attempt %d", in.Attempt)
	}
	j.add(Finding{Severity: Warning, Code: "long_running", Lane: l.Name,
		Message: fmt.Sprintf("lane %s: stream sequence %d has been running for %s on lanes work instance %s%s (%s): its handler may hang, and in-progress acks keep it alive, so the server sees nothing wrong; the lane's other messages wait behind it",
			l.Name, in.Seq, fmtDuration(nonNegative(l.At.Sub(in.Since))), srv.Instance, attempt, usual),
		Advice: fmt.Sprintf("look at the handler on %s (lanes work logs 'a message has been running long'); --max-process-time stops a handler that runs longer and retries the message", srv.Instance)})
}

// handlerOutage: lanes work cannot run its handler at all (exit 126 or
// 127, a refused connection, its own stdout closed). It keeps the message
// and tries again; nothing is parked, so the server sees a message out
// and in-progress acks, nothing wrong.
func (j *judge) handlerOutage(l *Lane) {
	srv := l.Server
	if srv == nil || srv.Gone || srv.Outage == nil {
		return
	}
	o := srv.Outage
	j.add(Finding{Severity: Warning, Code: "handler_outage", Lane: l.Name,
		Message: fmt.Sprintf("lane %s: lanes work instance %s cannot run its handler (for %s: %s); the lane's message waits and is tried again, nothing is parked or terminated",
			l.Name, srv.Instance, fmtDuration(nonNegative(l.At.Sub(o.Since))), o.Reason),
		Advice: fmt.Sprintf("fix what the handler needs on %s (the --exec program, the --http service, lanes work's stdout): lanes work goes on by itself once it runs", srv.Instance)})
}

// keyWindow: what the owner of a key-parallel lane records about its
// window. A key whose messages fill the whole window stops every other key
// of the lane (its first message keeps failing, on --on-poison block, or
// runs long, and its later ones wait behind it); a message that has
// waited longer than the lane's ack wait for its key's earlier one says
// that one fails or runs long, while the other keys go on. The record is
// the live owner's only (Lane.Window), as for long_running; a holder the
// server no longer shows (the lane below its cap) has moved since.
func (j *judge) keyWindow(l *Lane) {
	w := l.Window()
	if w == nil {
		return
	}
	srv := l.Server
	oldest, waited, waiting := l.OldestWaiting()
	if w.Holder != "" && l.AtCap() {
		f := Finding{Severity: Warning, Code: "key_holds_window", Lane: l.Name,
			Message: fmt.Sprintf("lane %s: key %s holds the lane's whole window (%d of %d messages out are its own): its first message keeps failing or runs long, the others wait behind it, and no other key of the lane runs until it moves",
				l.Name, planner.Printable(w.Holder, 200), w.Held, w.Size)}
		if waiting && oldest.Key == w.Holder {
			f.Message += fmt.Sprintf(" (its oldest waiting message, stream sequence %d, has waited %s)", oldest.Seq, fmtDuration(waited))
		}
		f.Advice = fmt.Sprintf("read lanes work's errors for key %s on %s and fix the handler; or set the message aside: lanes work --on-poison park --dead-letter SUBJECT parks it after --park-after failures, a handler exit 65 terminates it, and the key goes on. A larger keys_in_flight only postpones this",
			planner.Printable(w.Holder, 200), srv.Instance)
		j.add(f)
		if waiting && oldest.Key == w.Holder {
			return // one fact
		}
	}
	wait := l.AckWait
	if wait <= 0 {
		wait = defaultAckWait
	}
	if waiting && waited > wait {
		j.add(Finding{Severity: Warning, Code: "key_waiting", Lane: l.Name,
			Message: fmt.Sprintf("lane %s: a message of key %s (stream sequence %d) has waited %s for the key's earlier message, longer than the lane's ack wait (%s): that message keeps failing or runs long; the lane's other keys go on",
				l.Name, planner.Printable(oldest.Key, 200), oldest.Seq, fmtDuration(waited), fmtDuration(wait)),
			Advice: fmt.Sprintf("read lanes work's errors for key %s on %s; --on-poison park sets a failing message aside, --max-process-time bounds a long one",
				planner.Printable(oldest.Key, 200), srv.Instance)})
	}
}

func headText(l *Lane) string {
	if l.Head == nil {
		return "its head message"
	}
	if l.Head.Key != "" {
		return fmt.Sprintf("its head message (seq %d, key %s)", l.Head.Seq, l.Head.Key)
	}
	return fmt.Sprintf("its head message (seq %d, %s)", l.Head.Seq, l.Head.Subject)
}

// idle: messages wait and nobody pulls.
func (j *judge) idle(l *Lane) {
	if l.Pending == 0 || l.AckPending > 0 || l.Waiting > 0 || l.Paused {
		return
	}
	wait := l.AckWait
	if wait <= 0 {
		wait = defaultAckWait
	}
	quiet, delivered := l.SinceDelivery()
	age, aged := l.Age()
	if delivered && quiet <= wait || !delivered && aged && age <= wait {
		return // between two pulls, or the messages are new
	}
	since := "has never delivered"
	if delivered {
		since = "has not delivered for " + fmtDuration(quiet)
	}
	j.add(Finding{Severity: Warning, Code: "no_workers", Lane: l.Name,
		Message: fmt.Sprintf("lane %s has %d message(s) waiting, no worker pulling, and %s", l.Name, l.Pending, since),
		Advice:  "start workers for this lane (they pull from its durable); a backlog only grows without them"})
}

// pause: a paused lane delivers nothing; held lanes wait for a repartition.
func (j *judge) pause(l *Lane) {
	if !l.Paused {
		return
	}
	if l.Held != "" {
		j.add(Finding{Severity: Info, Code: "held", Lane: l.Name,
			Message: fmt.Sprintf("lane %s is held (paused) for a %s; it delivers nothing until resumed", l.Name, l.Held),
			Advice:  "lanes apply resumes it once the old lanes have drained; re-run lanes apply to continue"})
		return
	}
	sev := Info
	if l.Backlog > 0 {
		sev = Warning
	}
	until := "for another " + fmtDuration(l.PauseRemaining)
	if l.PauseRemaining > pausedForGood {
		until = "until resumed"
	}
	who := ""
	if p := l.PausedBy; p != nil {
		who = " by " + planner.Printable(p.By, 80) + " at " + p.At.UTC().Format(time.RFC3339)
		if p.Reason != "" {
			who += " (" + planner.Printable(p.Reason, 200) + ")"
		}
	}
	design := l.Design
	if design == "" {
		design = "DESIGN"
	}
	j.add(Finding{Severity: sev, Code: "paused", Lane: l.Name,
		Message: fmt.Sprintf("lane %s is paused%s %s with %d message(s) waiting", l.Name, who, until, l.Backlog),
		Advice:  fmt.Sprintf("resume it when intended: lanes resume --stream %s --design %s --lanes %s", j.report.Stream, design, l.Name)})
}

// pausedForGood: a pause longer than this is shown as "until resumed"
// (lanes pause without --until pauses for a century).
const pausedForGood = 50 * 365 * 24 * time.Hour

// judgeStream records the faults of the stream and of the lanes together:
// overlaps, gaps, the consumer limit, placement and the head lookups.
func (j *judge) judgeStream(info *jetstream.StreamInfo, layouts []*layout, cover coverage) {
	j.overlaps(layouts, cover)
	gaps := j.gaps(layouts, cover)
	j.maxConsumers(info, gaps)
	j.placementFindings(info)
	j.drift(layouts)
	j.workerFindings()
	if j.headsTimedOut > 0 {
		j.add(Finding{Severity: Info, Code: "heads_timeout",
			Message: fmt.Sprintf("the head message of %d lane(s) could not be read in time: their lag age is unknown", j.headsTimedOut),
			Advice:  "raise --timeout, or check the stream leader's health"})
	}
}

// overlaps: a partition delivered by consumers that compete for its
// messages. Lanes of different designs on one partition do not compete:
// designs on one stream share its transform (two services that each want
// every message in key order), and each design's lane gets every message
// of the partition. Lanes of one design do, and so does a consumer of no
// known design (lanes did not create it) with any other.
func (j *judge) overlaps(layouts []*layout, cover coverage) {
	for _, l := range layouts {
		parts := make([]int, 0, len(cover[l]))
		for p := range cover[l] {
			parts = append(parts, p)
		}
		sort.Ints(parts)
		for _, p := range parts {
			for _, names := range j.competing(cover[l][p]) {
				j.add(j.overlapFinding(l, p, names))
			}
		}
	}
}

// competing groups the consumers of one partition into the sets that
// compete for its messages: all of them when one is of no known design,
// else the lanes of each design that has more than one.
func (j *judge) competing(names []string) [][]string {
	if len(names) < 2 {
		return nil
	}
	byDesign := map[string][]string{}
	var designs []string
	for _, n := range names {
		d := j.designOf(n)
		if d == "" {
			return [][]string{names}
		}
		if byDesign[d] == nil {
			designs = append(designs, d)
		}
		byDesign[d] = append(byDesign[d], n)
	}
	sort.Strings(designs)
	var out [][]string
	for _, d := range designs {
		if len(byDesign[d]) > 1 {
			out = append(out, byDesign[d])
		}
	}
	return out
}

// designOf is the design a lane is tagged with, "" when it has none (a
// consumer lanes did not create).
func (j *judge) designOf(name string) string {
	if l := j.lanes[name]; l != nil && l.Tagged {
		return l.Design
	}
	return ""
}

// overlapFinding tells apart the common mistake (each worker with its own
// durable on the lane's filter) from two lanes on one partition.
func (j *judge) overlapFinding(l *layout, p int, names []string) Finding {
	sort.Strings(names)
	sameFilter, untagged, durable := true, "", true
	var first string
	for i, n := range names {
		lane := j.report.Lane(n)
		if lane == nil {
			continue
		}
		if i == 0 {
			first = lane.Filter
		}
		sameFilter = sameFilter && lane.Filter == first
		durable = durable && lane.Durable
		if !lane.Tagged && untagged == "" {
			untagged = n
		}
	}
	// Name the odd one out: a consumer lanes did not create, or one whose
	// name is not the lane's planned name.
	subject := untagged
	for _, n := range names {
		if lane := j.report.Lane(n); subject == "" && lane != nil && n != planner.LaneName(lane.Design, lane.Partitions, lane.Partition) {
			subject = n
		}
	}
	if subject == "" {
		subject = names[len(names)-1]
	}
	list := strings.Join(names, ", ")
	if sameFilter && durable && untagged != "" {
		return Finding{Severity: Critical, Code: "duplicate_durable", Lane: subject,
			Message: fmt.Sprintf("durable consumers %s all filter %s: each gets its own copy of every message, so partition %d's keys are processed once per durable, concurrently", list, first, p),
			Advice:  "workers of one lane share its durable (bind to it by name); delete the extra durables"}
	}
	return Finding{Severity: Critical, Code: "overlap", Lane: subject,
		Message: fmt.Sprintf("partition %d of %s is delivered by %d consumers (%s): its keys are processed more than once, concurrently", p, l.Destination, len(names), list),
		Advice:  "keep one lane per partition and design, and delete the others"}
}

// gaps finds partitions without a lane. Layouts that receive new messages
// are judged; when none is known (account mapping without a design file),
// the partitionings the lanes' metadata names are. Each design with lanes
// on a layout needs a lane on every partition of it (a lane of another
// design delivers the partition to another service); a consumer lanes did
// not create counts for every design.
func (j *judge) gaps(layouts []*layout, cover coverage) int {
	var judged []*layout
	for _, l := range layouts {
		if l.Current {
			judged = append(judged, l)
		}
	}
	if len(judged) == 0 {
		judged = layouts
	}
	total := 0
	for _, l := range judged {
		designs := j.designsOn(cover[l])
		named := len(designs) > 1
		switch {
		case j.design != "" && slices.Contains(designs, j.design):
			designs = []string{j.design}
		case j.design != "" || len(designs) == 0:
			designs = []string{""} // any lane
		}
		for _, d := range designs {
			var missing []int
			for p := 0; p < l.Partitions; p++ {
				if !j.covered(cover[l][p], d) {
					missing = append(missing, p)
				}
			}
			total += len(missing)
			if len(missing) == 0 {
				continue
			}
			what, whose := fmt.Sprintf("partition(s) %s of %s", ranges(missing), l.Destination), ""
			if named && d != "" {
				whose = " of design " + d
			}
			j.add(gapFinding(what, whose, len(missing), l.Partitions))
		}
	}
	if len(layouts) == 0 {
		total += j.tagGaps()
	}
	return total
}

// designsOn lists the designs of the lanes that cover a layout, sorted.
func (j *judge) designsOn(parts map[int][]string) []string {
	seen := map[string]bool{}
	for _, names := range parts {
		for _, n := range names {
			if d := j.designOf(n); d != "" {
				seen[d] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// covered reports whether one of the consumers delivers the partition to
// design d ("": to anyone).
func (j *judge) covered(names []string, d string) bool {
	for _, n := range names {
		if d == "" || j.designOf(n) == "" || j.designOf(n) == d {
			return true
		}
	}
	return false
}

// tagGaps checks lanes' own partition counts when no layout is known.
func (j *judge) tagGaps() int {
	type group struct {
		design string
		n      int
	}
	seen := map[group]map[int]bool{}
	for _, l := range j.report.Lanes {
		if l.Tagged && l.Partitions > 0 {
			g := group{l.Design, l.Partitions}
			if seen[g] == nil {
				seen[g] = map[int]bool{}
			}
			seen[g][l.Partition] = true
		}
	}
	total := 0
	for g, have := range seen {
		var missing []int
		for p := 0; p < g.n; p++ {
			if !have[p] {
				missing = append(missing, p)
			}
		}
		total += len(missing)
		if len(missing) > 0 {
			j.add(gapFinding(fmt.Sprintf("partition(s) %s of design %s (n%d)", ranges(missing), g.design, g.n), "", len(missing), g.n))
		}
	}
	return total
}

// gapFinding: what names the partitions, whose the design that has no
// lane for them ("" when the layout has one design's lanes, or none).
func gapFinding(what, whose string, missing, n int) Finding {
	return Finding{Severity: Critical, Code: "gap",
		Message: fmt.Sprintf("%s have no lane%s (%d of %d): their messages are stored and no lane%s delivers them", what, whose, missing, n, whose),
		Advice:  "create the missing lanes: lanes apply -f <design file>"}
}

func (j *judge) maxConsumers(info *jetstream.StreamInfo, gaps int) {
	lanes := len(j.report.Lanes)
	need := lanes + gaps
	limit := info.Config.MaxConsumers
	switch {
	case limit > 0 && limit < need:
		j.add(Finding{Severity: Critical, Code: "max_consumers",
			Message: fmt.Sprintf("the stream allows %d consumers but its lanes need %d (%d lanes, %d partitions without one)", limit, need, lanes, gaps),
			Advice:  "raise the stream's max_consumers (it can be raised on a live stream); plan for twice the lanes to repartition side by side"})
	case limit <= 0 && need > serverDefaultMaxConsumers && info.State.Consumers <= serverDefaultMaxConsumers:
		j.add(Finding{Severity: Warning, Code: "max_consumers",
			Message: fmt.Sprintf("the lanes need %d consumers; the stream sets no max_consumers, so the server's default cap (%d unless configured) applies", need, serverDefaultMaxConsumers),
			Advice:  "set the stream's max_consumers to at least the lane count (lanes apply does)"})
	}
}

func (j *judge) placementFindings(info *jetstream.StreamInfo) {
	pr := j.placement
	if pr == nil {
		return
	}
	if pr.unchecked > 0 {
		j.add(Finding{Severity: Info, Code: "placement_unchecked",
			Message: fmt.Sprintf("placement not checked: the stream has %d subjects, more than the %d inspect reads", pr.unchecked, pr.limit),
			Advice:  "raise the limit (health.Options.MaxSubjects) for a one-off check when the server can afford it"})
		return
	}
	if pr.misplaced > 0 {
		j.add(Finding{Severity: Critical, Code: "misplaced",
			Message: fmt.Sprintf("%d message(s) on %d subject(s) sit in a partition their key does not hash to, e.g. %s: published around the mapping, their keys are split across two lanes", pr.misplaced, pr.misplacedN, strings.Join(pr.misplacedList, "; ")),
			Advice:  "publish to the mapping's source subjects only, never to partitioned ones; these messages are processed out of their key's order"})
	}
	unpartitioned, subjects, sample := pr.unpartitioned, pr.unpartitionedSubjects, pr.unpartitionedSample
	if len(pr.unmatched) > 0 {
		unpartitioned, subjects, sample = j.retired(info, pr.unmatched)
	}
	if unpartitioned > 0 {
		j.add(Finding{Severity: Warning, Code: "unpartitioned",
			Message: fmt.Sprintf("%d message(s) on %d subject(s) are not partitioned, e.g. %s: no lane delivers them", unpartitioned, subjects, strings.Join(sample, ", ")),
			Advice:  "they were stored before the mapping existed or outside it: republish them through the mapping, or purge them"})
	}
}

// retired tells apart, among the messages on no current partition
// layout, those of generations lanes apply drained and retired (recorded
// in the stream's metadata): their lanes processed every one of them
// before apply deleted the lanes, so they only take space. One info
// finding per retired generation, with purge advice bounded by the
// retirement sequence (a purge that cannot reach a message stored after
// it). A message stored under its subjects after the retirement (found by
// Read: published around the mapping, or by a server still mapping to
// the generation) was processed by nobody: the finding says so, and is a
// warning. It returns what is left: messages no lane delivers.
func (j *judge) retired(info *jetstream.StreamInfo, unmatched map[string]uint64) (msgs uint64, subjects int, sample []string) {
	type gen struct {
		design string
		n      int
		rec    planner.GenerationRecord
		msgs   uint64
		subs   int
	}
	var gens []*gen
	for design, recs := range planner.Generations(info.Config.Metadata) {
		for n, rec := range recs {
			if rec.Retired() && rec.Subjects != "" {
				gens = append(gens, &gen{design: design, n: n, rec: rec})
			}
		}
	}
	sort.Slice(gens, func(a, b int) bool {
		if gens[a].design != gens[b].design {
			return gens[a].design < gens[b].design
		}
		return gens[a].n < gens[b].n
	})
	names := make([]string, 0, len(unmatched))
	for s := range unmatched {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		n := unmatched[s]
		var owner *gen
		for _, g := range gens {
			if subjectMatches(g.rec.Subjects, s) {
				owner = g
				break
			}
		}
		if owner != nil {
			owner.msgs += n
			owner.subs++
			continue
		}
		msgs += n
		subjects++
		if len(sample) < 3 {
			sample = append(sample, s)
		}
	}
	for _, g := range gens {
		if g.msgs == 0 {
			continue
		}
		f := Finding{Severity: Info, Code: "retired",
			Message: fmt.Sprintf("%d message(s) on %d subject(s) of design %s's retired generation %s (%s): its lanes processed every message up to stream sequence %d before lanes apply retired them, so no lane needs to deliver them",
				g.msgs, g.subs, g.design, planner.Generation(g.n), g.rec.Subjects, g.rec.RetiredSeq),
			Advice: fmt.Sprintf("they only take space until the stream's limits remove them; to remove them now (never a message stored after the retirement): nats stream purge %s --subject '%s' --seq %d",
				j.report.Stream, g.rec.Subjects, g.rec.RetiredSeq+1)}
		if m, ok := j.afterRetirement[planner.GenerationKey(g.design, g.n)]; ok {
			f.Severity = Warning
			f.Message += fmt.Sprintf("; but message(s) stored after it, the first at seq %d (%s), published around the mapping or by a server still mapping to %s, were processed by nobody",
				m.Seq, planner.Printable(m.Subject, 200), planner.Generation(g.n))
			f.Advice = fmt.Sprintf("the messages stored after seq %d were processed by no lane: republish them through the mapping, or drop them deliberately; ", g.rec.RetiredSeq) + f.Advice
		}
		j.add(f)
	}
	return msgs, subjects, sample
}

// subjectMatches reports whether subject matches pattern ('*' and '>'
// wildcards).
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, t := range pt {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || t != "*" && t != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

// drift: the design file's mapping is not the one in force on the server
// (the stream's transform, or with mapping: account the one the design's
// lanes are on), or the stream has another transform beside it. The
// file is older than the server (lanes apply --partitions 16 while it
// says 8), or a repartition is in progress: a warning, and gaps are
// judged against the mapping in force.
func (j *judge) drift(layouts []*layout) {
	var design, other *layout
	for _, l := range layouts {
		switch {
		case l.Origin == "design":
			design = l
		case l.Current && (other == nil || l.Origin == "stream"):
			other = l
		}
	}
	if design == nil || other == nil || design.Current && other.Origin != "stream" {
		return
	}
	where := "the stream maps"
	if other.Origin != "stream" {
		where = "the design's lanes on the server are on"
		if j.design != "" {
			where = fmt.Sprintf("design %s's lanes on the server are on", j.design)
		}
	}
	f := Finding{Severity: Warning, Code: "mapping_drift",
		Message: fmt.Sprintf("the design file maps %s -> %s (%d partitions), but %s %s -> %s (%d partitions)",
			design.Source, design.Destination, design.Partitions, where, other.Source, other.Destination, other.Partitions),
		Advice: "lanes apply -f <design file> --dry-run shows the change; mid-repartition this is expected until it completes"}
	if !design.Current {
		f.Message += fmt.Sprintf(": the server was changed after the file (lanes apply --partitions %d does that), or a repartition is in progress. New messages go through the server's mapping: gaps are judged against it", other.Partitions)
		f.Advice = fmt.Sprintf("if the server is right, update the design file (partitions: %d) so the next lanes apply -f does not repartition back; lanes apply -f <design file> --dry-run shows what applying the file as it is would change", other.Partitions)
	}
	j.add(f)
}

// workerFindings: what the membership bucket says beyond single lanes:
// messages parked on a dead-letter subject, and a bucket that could not
// be read.
func (j *judge) workerFindings() {
	r := j.report
	if r.WorkersUnknown != "" {
		j.add(Finding{Severity: Info, Code: "workers_unknown",
			Message: fmt.Sprintf("who serves the lanes is unknown: lanes work's membership bucket %s could not be read: %s", membership.Bucket, r.WorkersUnknown),
			Advice:  fmt.Sprintf("give the user read access to the KV bucket %s (stream KV_%s), or raise --timeout; the lanes' own figures are complete", membership.Bucket, membership.Bucket)})
	}
	for _, w := range r.Workers {
		for _, q := range w.Quarantined {
			j.add(quarantineFinding(w.Design, q))
		}
		for _, p := range w.Parked {
			switch {
			case p.Err == "" && p.Stream == "":
				j.add(Finding{Severity: Warning, Code: "dead_letter_unstored",
					Message: fmt.Sprintf("design %s's workers park poison messages on %s, but no stream stores that subject: a park fails, and the message blocks its lane", w.Design, p.Subject),
					Advice:  fmt.Sprintf("create a stream for it (e.g. nats stream add DLQ --subjects '%s'), or run lanes work without --dead-letter", p.Subject)})
			case p.Count > 0:
				j.add(Finding{Severity: Info, Code: "parked",
					Message: fmt.Sprintf("%d message(s) of design %s are parked on %s (stream %s): lanes work set them aside after they failed (--on-poison park), and their keys moved on without them", p.Count, w.Design, p.Subject, p.Stream),
					Advice:  fmt.Sprintf("look at them (nats stream view %s --subject %s; the Lanes-Parked-* headers say where each came from and why), then replay or discard them deliberately", p.Stream, p.Subject)})
			}
		}
	}
}

// quarantineFinding: a key lanes work quarantined; its messages are parked
// unrun until a replay lifts it.
func quarantineFinding(design string, q membership.Quarantine) Finding {
	msg := fmt.Sprintf("key %s of design %s is quarantined since seq %d (lane %s, %s, by %s): its messages are parked unrun, in order; other keys go on",
		planner.Quote(q.Key, 100), design, q.Seq, q.Lane, q.At.UTC().Format(time.RFC3339), q.Instance)
	if q.Error != "" {
		msg += "; it failed with: " + planner.OneLine(q.Error, 200)
	}
	if q.State != membership.QuarantineOn {
		msg += fmt.Sprintf("; a replay is under way (%s)", q.State)
	}
	return Finding{Severity: Warning, Code: "quarantined", Lane: q.Lane, Message: msg,
		Advice: fmt.Sprintf("fix the handler, then lanes parked replay --key %s (its parked messages run in order, then the quarantine is lifted)", shellWord(q.Key))}
}

// shellWord quotes a key for a command line when it needs it.
func shellWord(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:@", c)) {
			return "'" + strings.ReplaceAll(planner.Printable(s, 100), "'", `'\''`) + "'"
		}
	}
	return s
}
