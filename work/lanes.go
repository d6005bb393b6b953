package work

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/converge"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/planner"
)

// laneInfo is what the runtime needs to know about a lane, read from its
// consumer info: the server's config is the truth, not the design file.
type laneInfo struct {
	name          string
	partition     int
	partitions    int
	ackWait       time.Duration
	backoff       []time.Duration
	maxDeliver    int
	maxAckPending int
	// keys is the lane's keys in flight: 1 on a serial lane; above 1, a
	// key-parallel lane (see keyed.go), whose window is maxAckPending.
	keys   int
	group  string // the priority group of a pinned lane, else ""
	paused bool
	// replicated: the lane's consumer has replicas, so a leader change can
	// lose an ack it applied; its acks wait for the server's answer.
	replicated bool
	layout     *planner.Layout // reads keys from stored subjects; nil when the metadata has no mapping

	// backlog is the lane's pending plus ack pending at the listing: the
	// autoscaling figure counts the lanes with one (metrics.go).
	backlog uint64
}

// defaultRetry are the redelivery delays after a failure when the lane has
// no backoff: a failing handler must not spin, and the lane waits anyway.
var defaultRetry = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}

// deadline is how long the server waits for an ack of the given delivery
// (1-based) before redelivering: the backoff step for that delivery when the
// lane has one, else the ack wait. In-progress acks restart it.
func (l *laneInfo) deadline(attempt int) time.Duration {
	return planner.AckDeadline(l.ackWait, l.backoff, attempt)
}

// nakDelay returns the delay to put in a -NAK after a failed attempt so
// that the redelivery comes after want (want < 0: the lane's schedule),
// and that effective delay (planner.NakDelay has the server's rule). A
// nak delay keeps the ack-pending slot, so the lane idles for it, which
// is what order needs.
func (l *laneInfo) nakDelay(attempt int, want time.Duration) (send, effective time.Duration) {
	if want < 0 {
		if len(l.backoff) > 0 {
			want = l.deadline(attempt)
		} else {
			want = defaultRetry[min(max(attempt-1, 0), len(defaultRetry)-1)]
		}
	}
	return planner.NakDelay(l.ackWait, l.backoff, attempt, want), want
}

// lanesListing is what a listing of the stream's consumers says of a
// design: its lanes; the consumers tagged for it that the runtime refuses
// to serve (with why); the consumers the server could not report
// (cluster: leader not answering); the lanes of other designs on the
// stream, counted per design; and every consumer of the stream, counted
// (what the cheap check between listings compares: see checkLanes).
type lanesListing struct {
	found     map[string]*laneInfo
	refused   map[string]string
	missing   []string
	others    map[string]int
	consumers int
}

// listLanes lists design's lanes on stream (see lanesListing).
func listLanes(ctx context.Context, api *jsapi.Client, stream, design string, layouts map[string]*planner.Layout, pins bool, streamReplicas int) (*lanesListing, error) {
	listing, err := api.List(ctx, stream)
	if err != nil {
		return nil, err
	}
	ll := &lanesListing{found: map[string]*laneInfo{}, refused: map[string]string{}, others: map[string]int{},
		consumers: len(listing.Consumers) + len(listing.Missing) + len(listing.Offline)}
	for _, ci := range listing.Consumers {
		tag, ok := planner.TagOf(ci.Config.Metadata)
		if ok && tag.Design != design {
			ll.others[tag.Design]++
		}
		if !ok || tag.Design != design {
			continue
		}
		info, why := laneFromInfo(ci, tag, layouts, pins)
		if why != "" {
			ll.refused[ci.Name] = why
			continue
		}
		if ci.Config.Replicas == 0 && streamReplicas > 1 {
			info.replicated = true
		}
		ll.found[ci.Name] = info
	}
	ll.missing = append([]string(nil), listing.Missing...)
	for name := range listing.Offline {
		ll.missing = append(ll.missing, name)
	}
	return ll, nil
}

// noLanesRepeat is how often the warning that a design has no lanes is
// repeated while it stays so.
var noLanesRepeat = 5 * time.Minute

// warnNoLanes says, at start and every noLanesRepeat while it stays so,
// that the stream has no lanes of the design, naming the designs that it
// has lanes of (a typo in the design name, or a design not applied yet). The
// instance keeps running: lanes applied later are served. w.mu is held.
func (w *Worker) warnNoLanes(found map[string]*laneInfo, refused map[string]string, others map[string]int) {
	if len(found) > 0 || len(refused) > 0 {
		w.noLanesWarned = time.Time{}
		return
	}
	if !w.noLanesWarned.IsZero() && time.Since(w.noLanesWarned) < noLanesRepeat {
		return
	}
	w.noLanesWarned = time.Now()
	there := "the stream has no lanes of any design"
	if len(others) > 0 {
		var names []string
		for _, d := range slices.Sorted(maps.Keys(others)) {
			names = append(names, fmt.Sprintf("%s (%d lane%s)", d, others[d], map[bool]string{true: "s"}[others[d] != 1]))
		}
		there = "designs with lanes there: " + strings.Join(names, ", ")
	}
	w.log.Warn(fmt.Sprintf("no lanes of design %s on stream %s; %s. Serving nothing until lanes of %s appear (lanes apply creates them); check the design name",
		w.cfg.Design, w.cfg.Stream, there, w.cfg.Design))
}

// laneFromInfo reads what the runtime needs from a lane's consumer info,
// or says why it is not served. pins: the server has pinned priority
// groups, which a key-parallel lane needs.
func laneFromInfo(ci *jetstream.ConsumerInfo, tag planner.Tag, layouts map[string]*planner.Layout, pins bool) (*laneInfo, string) {
	cfg := ci.Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, "its ack policy is not explicit: a crash would lose the message in flight (recreate the lane with explicit acks: lanes apply can)"
	}
	keys := max(tag.KeysInFlight, 1)
	if cfg.MaxAckPending == 1 {
		keys = 1 // one message out at a time: serial, whatever the metadata says
	}
	switch {
	case keys == 1 && cfg.MaxAckPending != 1:
		return nil, fmt.Sprintf("max ack pending is %d: two messages of the lane could run at once, out of order (lanes apply sets it to 1)", cfg.MaxAckPending)
	case keys > 1 && !pins:
		return nil, fmt.Sprintf("it is key-parallel (keys in flight %d), which needs nats-server %s or newer (pinned priority groups)", keys, KeyParallelVersion)
	case keys > 1 && (cfg.PriorityPolicy != jetstream.PriorityPolicyPinned || len(cfg.PriorityGroups) == 0):
		return nil, fmt.Sprintf("it is key-parallel (keys in flight %d) but not pinned: the server could deliver its messages to two instances at once (lanes apply pins it)", keys)
	case keys > 1 && cfg.MaxAckPending < 1:
		return nil, fmt.Sprintf("it is key-parallel (keys in flight %d) with no max ack pending: the server must bound its window (lanes apply sets it to %d)", keys, keys)
	}
	if cfg.DeliverSubject != "" {
		return nil, "it is a push consumer"
	}
	info := &laneInfo{
		name:          ci.Name,
		partition:     tag.Partition,
		partitions:    tag.Partitions,
		ackWait:       cfg.AckWait,
		backoff:       cfg.BackOff,
		maxDeliver:    cfg.MaxDeliver,
		maxAckPending: cfg.MaxAckPending,
		keys:          keys,
		paused:        ci.Paused,
		backlog:       ci.NumPending + uint64(max(ci.NumAckPending, 0)),
		// Replicas 0 follows the stream's: replicated when the server
		// names replicas, or (listLanes) when the stream has them.
		replicated: cfg.Replicas > 1 || cfg.Replicas == 0 && ci.Cluster != nil && len(ci.Cluster.Replicas) > 0,
	}
	if info.ackWait <= 0 {
		info.ackWait = 30 * time.Second
	}
	if cfg.PriorityPolicy == jetstream.PriorityPolicyPinned && len(cfg.PriorityGroups) > 0 {
		info.group = cfg.PriorityGroups[0]
	}
	if tag.Source != "" && tag.Destination != "" {
		k := tag.Source + "\x00" + tag.Destination
		l, ok := layouts[k]
		if !ok {
			l, _ = planner.ParseLayout(tag.Source, tag.Destination) // nil: keys unknown, not fatal
			layouts[k] = l
		}
		info.layout = l
	}
	return info, ""
}

// keyOf reads the ordering key from a stored subject.
func (l *laneInfo) keyOf(subject string) string {
	if l.layout == nil {
		return ""
	}
	k, _ := l.layout.StoredKey(subject)
	return k
}

// KeyParallelVersion is the first nats-server with pinned priority
// groups, which key-parallel lanes need.
const KeyParallelVersion = "2.11.0"

// serverAtLeast says whether a server version ("2.15.2", "2.11.0-beta.1")
// is at least major.minor; an unreadable version is not.
func serverAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// followApplies watches apply's lock of the stream (converge.LockKey in
// the converge.LockBucket bucket) and lists the lanes again when it
// changes: apply takes it before it changes lanes and releases it after,
// and a lane's changed settings (its ack wait, its keys in flight) come
// with no advisory. Started by a full listing, until it works (the bucket
// exists once something was applied with the lock); apply --lock=false
// changes are seen at the next full listing.
func (w *Worker) followApplies() {
	w.mu.Lock()
	following := w.applies != nil
	w.mu.Unlock()
	if following {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	kv, err := w.js.KeyValue(ctx, converge.LockBucket)
	if err != nil {
		return
	}
	watcher, err := kv.Watch(context.Background(), converge.LockKey(w.cfg.Stream), jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return
	}
	w.mu.Lock()
	if w.applies != nil || w.abort.Err() != nil {
		w.mu.Unlock()
		_ = watcher.Stop()
		return
	}
	w.applies = watcher
	w.mu.Unlock()
	go func() {
		for range watcher.Updates() {
			w.relistSoon()
		}
		w.mu.Lock()
		if w.applies == watcher {
			w.applies = nil // ended (the bucket deleted, say): started again by the next listing
		}
		w.mu.Unlock()
	}()
}

// stopFollowingApplies ends followApplies' watch.
func (w *Worker) stopFollowingApplies() {
	w.mu.Lock()
	watcher := w.applies
	w.applies = nil
	w.mu.Unlock()
	if watcher != nil {
		_ = watcher.Stop()
	}
}
