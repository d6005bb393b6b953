// Package work processes a lanes design's lanes: it runs a Handler for
// every message, one message at a time per key and in stream order, on as
// many instances as are started, following repartitions as they happen.
//
//	js, _ := jetstream.New(nc)
//	w, err := work.New(js, work.Config{Stream: "ORDERS", Design: "orders"},
//		work.HandlerFunc(func(ctx context.Context, m *work.Msg) error {
//			return apply(ctx, m.Key, m.Seq, m.Data) // nil acks; Term(err) terminates; RetryAfter(d, err) retries after d
//		}))
//	err = w.Run(ctx) // until ctx ends; then the messages in flight finish and the lanes are handed over
//
// Instances find each other in a KV bucket (package membership): each
// holds a lease, every instance computes the same owner for each lane
// from the same members (Assign), and a lane is taken and handed over
// through its record there, so that two instances never run a lane's
// messages at once, even one that was frozen or cut off. Lanes are found by
// their metadata and followed while running: a repartition's new lanes
// are served as they appear, held lanes are pulled from so they start the
// moment they are resumed, deleted lanes are dropped.
//
// Per lane: pull one message, run the handler while sending in-progress
// acks, settle it with an ack the server confirms, only then take the
// next. Max ack pending 1 makes the server the judge of which message is
// out. A key-parallel lane (the design's keys_in_flight K above 1, max ack
// pending K) runs up to K messages of distinct keys at once, one per key:
// a key's next message starts only after the one before it is settled, and
// a failing key holds only its own messages (see keyed.go). Package
// handlers has the --exec and --http handlers of the CLI. See docs/work.md.
package work

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// relistDebounce is how long a re-listing waits after an advisory.
const relistDebounce = 250 * time.Millisecond

// ErrGraceExpired: Run stopped, but messages still in flight when the grace
// period ended were handed back for redelivery.
var ErrGraceExpired = errors.New("grace period over")

// ErrAborted: Abort stopped Run; messages in flight were handed back.
var ErrAborted = errors.New("aborted")

// Worker serves a design's lanes with a handler.
type Worker struct {
	cfg       Config
	nc        *nats.Conn
	apiPrefix string // where JetStream API requests go
	js        jetstream.JetStream
	api       *jsapi.Client
	handler   Handler
	log       *slog.Logger
	scope     string
	kv        jetstream.KeyValue

	// abort ends handlers and pulls at once: Abort, or the grace period
	// running out after Run's context ended.
	abort     context.Context
	abortFn   context.CancelFunc
	abortedBy error

	relist chan struct{}
	wake   chan struct{}
	// trouble: a lease renewal found no stream behind the membership
	// bucket: the control loop checks whether it was deleted.
	trouble chan struct{}

	sess     *membership.Session // this instance's membership: set by Run before any lane starts
	replicas int                 // of the design's stream: the bucket is created with as many

	mu           sync.Mutex
	claimsAfter  time.Time // no lane is taken before (the bucket was recreated)
	running      map[string]*lane
	stats        map[string]*laneStats
	lanes        map[string]*laneInfo
	refused      map[string]string
	members      map[string]string // live instance -> its epoch
	layouts      map[string]*planner.Layout
	deletedLanes map[string]time.Time // reported deleted by the server (when), not yet by a listing
	joined       bool
	serving      atomic.Int64 // lanes running here (len(running)), read by pullPace
	lanesChanged bool         // a listing added or dropped lanes: rebalance
	// The last full listing: when, and how many consumers the stream had
	// (see checkLanes).
	listedAt        time.Time
	listedConsumers int
	applies         jetstream.KeyWatcher // apply's lock of the stream, watched (followApplies)
	released        int                  // lanes handed over so far

	// What the worker tells about itself, also guarded by mu.
	outageSince   time.Time // when the handler outage that lanes wait on began; zero: none (outage.go)
	leaveErr      error     // why leaving the membership failed at the stop (stop.go)
	noLanesWarned time.Time // when it was last said that the design has no lanes (lanes.go)

	probe probe // what Ready and Healthy read (probes.go)

	skips skipBook // the design's skip requests (lanes skip), by lane (skip.go)

	quarantines quarantineBook // the design's quarantined keys (quarantine.go)

	snap recordSnapshot // lane records read at once for a burst of takes (take.go)
}

// New checks the config and prepares a worker on js's connection, sending
// JetStream API requests where js does (its domain or API prefix).
//
// A permission violation reaches the connection's error handler, not the
// worker: to stop on one, cancel Run's context with it as the cause (Run
// then returns it).
func New(js jetstream.JetStream, cfg Config, h Handler) (*Worker, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("a handler is required")
	}
	conn := connect.Around(js, cfg.Timeout)
	w := &Worker{
		cfg:          cfg,
		nc:           conn.NC,
		js:           js,
		api:          jsapi.New(conn),
		apiPrefix:    conn.APIPrefix,
		handler:      h,
		log:          cfg.Logger,
		scope:        membership.Scope(cfg.Stream, cfg.Design),
		relist:       make(chan struct{}, 1),
		wake:         make(chan struct{}, 1),
		trouble:      make(chan struct{}, 1),
		running:      map[string]*lane{},
		stats:        map[string]*laneStats{},
		lanes:        map[string]*laneInfo{},
		refused:      map[string]string{},
		members:      map[string]string{},
		layouts:      map[string]*planner.Layout{},
		deletedLanes: map[string]time.Time{},
	}
	w.abort, w.abortFn = context.WithCancel(context.Background())
	if cfg.Metrics != nil {
		cfg.Metrics.w.Store(w)
	}
	return w, nil
}

// Instance is this worker's name in the membership.
func (w *Worker) Instance() string { return w.cfg.Instance }

// Abort stops at once: handlers are cancelled (their contexts end),
// messages in flight are handed back with a nak, and Run returns
// ErrAborted.
func (w *Worker) Abort() {
	w.mu.Lock()
	if w.abortedBy == nil {
		w.abortedBy = ErrAborted
	}
	w.mu.Unlock()
	w.abortFn()
}

func (w *Worker) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, w.cfg.Timeout)
}

// Run serves lanes until ctx ends, then stops taking messages, lets the
// ones in flight finish within the grace period, acks them, hands the lanes
// over at once and returns nil (or ErrGraceExpired, or ErrAborted). A ctx
// cancelled with a cause (context.WithCancelCause) other than a plain
// cancellation or deadline stops it the same way, and Run returns that
// cause: a permission violation seen by the connection's error handler,
// say.
func (w *Worker) Run(ctx context.Context) error {
	w.probe.start()
	err := w.run(ctx)
	if ctx.Err() != nil {
		w.probe.stop() // before the end is told: an end asked for is no failure
	}
	w.probe.end(err)
	return err
}

// run is Run; Run tells the probes how it ended.
func (w *Worker) run(ctx context.Context) error {
	defer w.abortFn()
	// Not ready from the moment a stop is asked for, not when the
	// control loop gets to it.
	defer context.AfterFunc(ctx, w.probe.stop)()
	var err error
	if w.replicas, err = w.checkServer(ctx); err != nil {
		return err
	}
	// The first listing, the longest step at thousands of lanes (16,384:
	// about 0.7 s), runs while the membership is opened and watched.
	defer w.stopFollowingApplies()
	firstListing := make(chan error, 1)
	go func() { firstListing <- w.listLanes(ctx) }()
	sctx, cancel := w.ctx(ctx)
	kv, err := membership.Open(sctx, w.js, w.cfg.Bucket, w.replicas)
	cancel()
	if err != nil {
		<-firstListing
		return err
	}
	w.setKV(kv)
	defer w.watchSkips()()       // before any lane is taken: a lane knows a pending skip before its first message
	defer w.watchQuarantines()() // likewise: no message of a quarantined key runs
	if err := <-firstListing; err != nil {
		return err
	}
	w.warnSettings()
	ws, err := w.startWatches()
	if err != nil {
		return err
	}
	defer func() { ws.stop() }()
	host, _ := os.Hostname()
	ls := membership.NewSession(w.js, kv, w.scope, membership.Member{Instance: w.cfg.Instance, Host: host, PID: os.Getpid(),
		Started: time.Now().UTC(), DeadLetter: w.cfg.DeadLetter}, w.cfg.Lease)
	w.sess = ls
	if err := ls.Join(ctx, w.cfg.Timeout); err != nil {
		return err
	}
	w.probe.joined(ls)
	w.log.Info("joined", "instance", w.cfg.Instance, "stream", w.cfg.Stream, "design", w.cfg.Design,
		"lanes", len(w.lanes), "lease", w.cfg.Lease.String())
	unsub := w.followAdvisories()
	defer unsub()
	conn := w.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING)
	defer w.nc.RemoveStatusListener(conn)

	hb := w.startHeartbeat(ls)
	relistTicker := time.NewTicker(w.cfg.Relist)
	defer relistTicker.Stop()
	listed := make(chan error, 1)
	listing := false
	// A burst of advisories (apply creating 1,024 lanes) is read as one
	// listing a moment later, so that every instance sees the whole burst.
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	debouncing := false
	snapshot := false // the watch's initial values are in
	// repair: the membership watches ended (or a renewal found no
	// bucket): check the bucket, recreate it if it was deleted, watch
	// again; retried with a growing delay until it works.
	repair := time.NewTimer(time.Hour)
	repair.Stop()
	repairEvery := time.Second
	needRepair := func() {
		if ws != nil {
			ws.stop()
			ws = nil
			w.mu.Lock()
			clear(w.members)
			w.mu.Unlock()
			snapshot = false
		}
		repair.Reset(0)
	}

	for {
		w.probe.turn()
		var members <-chan membership.MemberEvent
		var records <-chan string
		if ws != nil {
			members, records = ws.members, ws.records
		}
		select {
		case <-ctx.Done():
			hb.stop()
			err := w.shutdown(ls)
			if cause := context.Cause(ctx); err == nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
				return cause
			}
			return err
		case <-w.abort.Done():
			w.probe.stop()
			hb.stop()
			return w.shutdown(ls)
		case ev, ok := <-members:
			if !ok {
				w.log.Warn("membership watch ended; watching again")
				needRepair()
				continue
			}
			if !w.applyMember(ev) && !ev.Initial {
				continue // a lease renewed: nothing to rebalance (16,384 lanes: 35 ms each)
			}
			if ev.Initial {
				snapshot = true
			}
		case lane, ok := <-records:
			if !ok {
				w.log.Warn("lane records watch ended; watching again")
				needRepair()
				continue
			}
			w.wakeLane(lane)
			continue
		case <-w.trouble:
			needRepair()
			continue
		case <-repair.C:
			if err := w.repair(ctx, ls, hb); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("cannot watch the membership; trying again", "error", err, "retry_in", repairEvery.String())
				}
				repair.Reset(repairEvery)
				repairEvery = min(2*repairEvery, 10*time.Second)
				continue
			}
			if ws, err = w.startWatches(); err != nil {
				ws = nil
				repair.Reset(repairEvery)
				continue
			}
			repairEvery = time.Second
			continue
		case st := <-conn:
			w.connectionChanged(st)
			continue
		case <-relistTicker.C:
			if !listing {
				listing = true
				go func() { listed <- w.checkLanes(ctx) }()
			}
			continue
		case <-w.relist:
			if !debouncing {
				debouncing = true
				debounce.Reset(relistDebounce)
			}
			continue
		case <-debounce.C:
			debouncing = false
			if !listing {
				listing = true
				go func() { listed <- w.listLanes(ctx) }()
			} else {
				w.relistSoon() // after the one running
			}
			continue
		case err := <-listed:
			listing = false
			if err != nil && ctx.Err() == nil {
				w.log.Warn("cannot list the lanes; keeping the last listing", "error", err)
			}
			if !w.takeLanesChanged() {
				continue // the same lanes: the same assignment
			}
		case <-w.wake:
		}
		if snapshot {
			w.rebalance()
		}
	}
}

// checkServer finds the stream (its replicas size the membership bucket)
// and a stream for the dead-letter subject, which must exist and must not
// be the design's own (parked messages would come back into the lanes).
func (w *Worker) checkServer(ctx context.Context) (int, error) {
	rctx, cancel := w.ctx(ctx)
	defer cancel()
	info, err := w.api.StreamInfo(rctx, w.cfg.Stream)
	if jsapi.IsStreamNotFound(err) {
		return 0, fmt.Errorf("stream %s not found: apply the design first (lanes apply -f <design>)", w.cfg.Stream)
	}
	if err != nil {
		return 0, err
	}
	if w.cfg.DeadLetter != "" {
		name, err := w.api.StreamBySubject(rctx, w.cfg.DeadLetter)
		switch {
		case jsapi.IsStreamNotFound(err):
			return 0, fmt.Errorf("dead-letter subject %s: no stream stores it, so parked messages would be lost: create a stream that stores it first", w.cfg.DeadLetter)
		case err != nil:
			return 0, fmt.Errorf("dead-letter subject %s: %w", w.cfg.DeadLetter, w.api.Conn().Classify(rctx, err))
		case name == w.cfg.Stream:
			return 0, fmt.Errorf("dead-letter subject %s is stored by the design's own stream %s: parked messages would come back into the lanes; use a subject of another stream", w.cfg.DeadLetter, name)
		}
	}
	return info.Config.Replicas, nil
}

// warnSettings says, once, when the lanes' settings make failover slower
// than the lease or make parking impossible.
func (w *Worker) warnSettings() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var slowest time.Duration
	var slowLane string
	for _, l := range w.lanes {
		if d := l.deadline(1); d > slowest {
			slowest, slowLane = d, l.name
		}
		if w.cfg.OnPoison != Block && l.maxDeliver > 0 && l.maxDeliver < w.cfg.ParkAfter {
			w.log.Warn("the lane's max deliver is below the attempts before parking: the server drops a failing message before it can be parked",
				"lane", l.name, "max_deliver", l.maxDeliver, "park_after", w.cfg.ParkAfter)
		}
	}
	if bound := 2 * w.cfg.Lease; slowest > bound {
		w.log.Warn(fmt.Sprintf("ack wait %s: when an instance dies, its lanes move within the lease (%s) but the message it had in flight is redelivered only after the ack wait; in-progress acks keep long jobs alive, so a short ack wait (5s, say) does not hurt them",
			slowest, w.cfg.Lease), "lane", slowLane)
	}
	for name, why := range w.refused {
		w.log.Warn("lane not served: "+why, "lane", name)
	}
}

// applyMember follows a member event; true when the members or their
// epochs changed (not a lease renewed).
func (w *Worker) applyMember(ev membership.MemberEvent) bool {
	if ev.Instance == "" {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	epoch, was := w.members[ev.Instance]
	if ev.Alive {
		if was && epoch == ev.Epoch {
			return false
		}
		w.members[ev.Instance] = ev.Epoch
	} else {
		delete(w.members, ev.Instance)
	}
	for _, l := range w.running {
		l.wake() // a lane waiting for a departed holder may take it now
	}
	if was == ev.Alive {
		return true // a new epoch
	}
	// Counts include this instance: until its own join is seen (the watch
	// gives the members found first), the others are told in one line
	// with it, not one by one with a count that leaves it out.
	_, selfIn := w.members[w.cfg.Instance]
	switch self := ev.Instance == w.cfg.Instance; {
	case self && ev.Alive:
		w.log.Info("in the membership", "members", len(w.members), "instances", slices.Sorted(maps.Keys(w.members)))
	case self, !selfIn:
	case ev.Alive:
		w.log.Info("instance joined", "instance", ev.Instance, "members", len(w.members))
	default:
		w.log.Info("instance left", "instance", ev.Instance, "members", len(w.members))
	}
	return true
}

// listLanes reads the design's lanes; lanes the server could not report
// (a cluster leader not answering) keep their last known settings.
func (w *Worker) listLanes(ctx context.Context) error {
	began := time.Now()
	ll, err := listLanes(ctx, w.api, w.cfg.Stream, w.cfg.Design, w.layouts, serverAtLeast(w.nc.ConnectedServerVersion(), 2, 11), w.replicas)
	if jsapi.IsStreamNotFound(err) {
		ll, err = &lanesListing{found: map[string]*laneInfo{}, refused: map[string]string{}}, nil
		w.log.Warn("stream not found: no lanes to serve", "stream", w.cfg.Stream)
	}
	if err != nil {
		return err
	}
	w.followApplies()
	found, refused := ll.found, ll.refused
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listedAt, w.listedConsumers = time.Now(), ll.consumers
	w.warnNoLanes(found, refused, ll.others)
	for _, name := range ll.missing {
		if old, ok := w.lanes[name]; ok {
			found[name] = old
		}
	}
	var added, gone []string
	for name := range found {
		if _, ok := w.lanes[name]; !ok && w.joined {
			added = append(added, name)
		}
	}
	for name := range w.lanes {
		if _, ok := found[name]; !ok {
			gone = append(gone, name)
		}
	}
	for name, at := range w.deletedLanes {
		_, listed := found[name]
		switch {
		case !listed:
			delete(w.deletedLanes, name)
		case began.After(at):
			// Listed by a listing begun after the server said it was
			// deleted: a new consumer of that name (a repartition back to
			// an earlier partition count recreates its lanes). Served
			// again.
			delete(w.deletedLanes, name)
			w.lanesChanged = true
		}
	}
	if len(added) > 0 {
		slices.Sort(added)
		w.log.Info("new lanes", "lanes", fewNames(added))
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		w.log.Info("lanes gone", "lanes", fewNames(gone))
	}
	for name, why := range refused {
		if _, ok := w.refused[name]; !ok && w.joined {
			w.log.Warn("lane not served: "+why, "lane", name)
		}
	}
	w.lanesChanged = w.lanesChanged || !w.joined || len(added) > 0 || len(gone) > 0
	w.lanes, w.refused, w.joined = found, refused, true
	for name, l := range w.running {
		if info, ok := found[name]; ok {
			old := l.info.Swap(info)
			if old.paused && !info.paused {
				l.resume()
			}
			if (old.keys > 1) != (info.keys > 1) {
				l.remode() // serial <-> key-parallel: settle, then serve in the new way
			}
		}
	}
	return nil
}

// fullListPerConsumer paces the full listings when nothing says the lanes
// changed: every Relist, or every 30 ms per consumer of the stream when
// that is longer (4,096 lanes: about 2 minutes; 16,384: about 8). A
// listing makes the server sort every consumer of the stream and read its
// state: at 16,384 lanes, one every 10 s took a third of its CPU with the
// lanes idle. Advisories, apply's lock and the count check (checkLanes)
// see changes sooner; the full listing is what catches the rest.
const fullListPerConsumer = 30 * time.Millisecond

// checkLanes runs every Relist between full listings: it compares the
// stream's consumer count (one stream info request) with the last
// listing's, and lists again when it changed or a full listing is due.
// Advisories (a lane created, deleted, paused or resumed) and apply's
// lock (followApplies) list at once; this catches what they missed.
func (w *Worker) checkLanes(ctx context.Context) error {
	w.mu.Lock()
	last := w.listedConsumers
	due := time.Since(w.listedAt) >= max(w.cfg.Relist, time.Duration(last)*fullListPerConsumer)
	w.mu.Unlock()
	if !due {
		rctx, cancel := w.ctx(ctx)
		info, err := w.api.StreamInfo(rctx, w.cfg.Stream)
		cancel()
		if err == nil && info.State.Consumers == last {
			return nil
		}
	}
	return w.listLanes(ctx)
}

// takeLanesChanged says whether a listing changed the design's lanes
// since it was last asked.
func (w *Worker) takeLanesChanged() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.lanesChanged
	w.lanesChanged = false
	return changed
}

func (w *Worker) relistSoon() {
	select {
	case w.relist <- struct{}{}:
	default:
	}
}

// laneDeleted is called by a lane that the server reports deleted, before
// it stops. The lane is not started again, but it stays in the assignment
// until a listing drops it, so that the other lanes keep their owners:
// every instance moves on at the next listing, not at its own view.
func (w *Worker) laneDeleted(name string) {
	w.mu.Lock()
	w.deletedLanes[name] = time.Now()
	w.mu.Unlock()
	w.relistSoon()
}

// followAdvisories re-lists as soon as a consumer of the stream is created,
// deleted, paused or resumed (a repartition's new lanes, their resume, a
// prune), not at the next tick, and makes a lane pull again when its
// consumer gets a new leader (a cluster node lost).
func (w *Worker) followAdvisories() func() {
	var subs []*nats.Subscription
	for _, kind := range []string{"CREATED", "DELETED", "PAUSE", "LEADER_ELECTED"} {
		s, err := w.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER."+kind+"."+w.cfg.Stream+".*", func(m *nats.Msg) {
			if kind == "LEADER_ELECTED" {
				// The lane's pull requests waited at the old leader: ask
				// the new one at once.
				w.leaderElected(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
				return
			}
			w.relistSoon()
		})
		if err != nil {
			w.log.Debug("cannot follow consumer advisories; relying on periodic listing", "error", err)
			continue
		}
		subs = append(subs, s)
	}
	return func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
}

// rebalance starts the lanes this instance owns and releases the others.
// A released lane finishes its message in flight first; it is started
// again when it comes back only once it is done.
func (w *Worker) rebalance() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, l := range w.running {
		select {
		case <-l.done:
			delete(w.running, name)
			if s := w.stats[name]; s != nil {
				s.serving.Store(false)
			}
		default:
		}
	}
	members := slices.Collect(maps.Keys(w.members))
	mine := map[string]bool{}
	_, member := w.members[w.cfg.Instance]
	epoch, _ := w.fence().Current()
	if member && w.abort.Err() == nil && w.fence().Holds(epoch) {
		// Each generation (partition count) is spread on its own, so a
		// repartition's new lanes appearing moves none of the old ones
		// while they drain, and both generations are spread evenly.
		generations := map[int][]string{}
		for name, l := range w.lanes {
			generations[l.partitions] = append(generations[l.partitions], name)
		}
		for _, names := range generations {
			for lane, owner := range Assign(members, names) {
				if owner == w.cfg.Instance {
					mine[lane] = true
				}
			}
		}
	}
	var took, gave []string
	var starting []*lane
	for name, l := range w.running {
		if !mine[name] && !l.releasing() {
			l.requestRelease()
			gave = append(gave, name)
			w.released++
			go w.whenDone(l)
		}
	}
	for name := range mine {
		if _, ok := w.running[name]; ok {
			continue
		}
		if _, deleted := w.deletedLanes[name]; deleted {
			continue
		}
		s := w.stats[name]
		if s == nil {
			s = &laneStats{hist: w.cfg.Metrics.observer(w.cfg.Stream, name)}
			w.stats[name] = s
		}
		l := newLane(w, w.lanes[name], s)
		w.running[name] = l
		took = append(took, name)
		starting = append(starting, l)
	}
	// Started once all are set up: 16,384 lanes starting one by one would
	// run beside this loop and wait for its lock.
	for _, l := range starting {
		go func() {
			l.run()
			w.whenDone(l)
		}()
	}
	w.serving.Store(int64(len(w.running)))
	if len(took) > 0 || len(gave) > 0 {
		slices.Sort(took)
		slices.Sort(gave)
		w.log.Info("rebalanced", "members", len(members), "serving", len(mine), "took", fewNames(took), "gave", fewNames(gave))
	}
}

// fewNames is lane names for a log line: all of them up to 16, else the
// first 12 and how many more (at 16,384 lanes a line naming them all
// would be 300 KB).
func fewNames(names []string) []string {
	if len(names) <= 16 {
		return names
	}
	return append(slices.Clip(names[:12]), fmt.Sprintf("and %d more", len(names)-12))
}

// whenDone wakes the control loop once a lane has stopped, so that a lane
// given back and then assigned again is restarted.
func (w *Worker) whenDone(l *lane) {
	<-l.done
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// shutdown: stop taking messages, leave the membership at once (the others
// take the lanes now; their first message of each lane comes after this
// instance's ack, max ack pending being 1, and this instance sends no pull
// request from then on), let the messages in flight finish within the
// grace period, ack them, hand them back if it ends.
func (w *Worker) shutdown(ls *membership.Session) error {
	w.mu.Lock()
	lanes := slices.Collect(maps.Values(w.running))
	inFlight := 0
	for _, l := range lanes {
		l.requestRelease()
		if l.stats.since.Load() != 0 {
			inFlight++
		}
	}
	w.mu.Unlock()
	grace := time.NewTimer(w.cfg.Grace)
	defer grace.Stop()
	// A key-parallel lane is handed over before this instance leaves: its
	// next owner must not find it with messages this one still runs
	// (max ack pending does not hold it back as it holds a serial lane).
	for _, l := range lanes {
		if l.info.Load().keys > 1 {
			w.waitLane(l, grace)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	leaveErr := ls.Leave(ctx, w.cfg.Timeout)
	if leaveErr != nil {
		w.log.Warn("cannot leave the membership: the others take over when the lease expires", "error", leaveErr)
	}
	cancel()
	if w.abort.Err() == nil {
		w.log.Info("stopping: finishing messages in flight", "in_flight", inFlight, "grace", w.cfg.Grace.String())
	}
	for _, l := range lanes {
		w.waitLane(l, grace)
	}
	for _, l := range lanes {
		l.stats.serving.Store(false)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running = map[string]*lane{}
	w.leaveErr = leaveErr
	return w.abortedBy
}

// waitLane waits until lane l has stopped; when the grace period ends
// first, the worker aborts (handlers are stopped, messages handed back).
func (w *Worker) waitLane(l *lane, grace *time.Timer) {
	select {
	case <-l.done:
		return
	case <-grace.C:
		w.mu.Lock()
		if w.abortedBy == nil {
			w.abortedBy = ErrGraceExpired
		}
		w.mu.Unlock()
		w.abortFn()
	case <-w.abort.Done():
	}
	<-l.done
}

// pullPace is the expiry and heartbeat of an idle lane's pull request
// now, paced by the lanes this instance serves (see pace).
func (w *Worker) pullPace() (time.Duration, time.Duration) {
	return pace(w.cfg.PullExpiry, int(w.serving.Load()))
}

// unpin releases a pinned lane's pin so the next pull gets it at once.
func (w *Worker) unpin(lane, group string) {
	err := w.api.UnpinConsumer(context.Background(), w.cfg.Stream, lane, group)
	if err != nil {
		w.log.Warn("cannot unpin the lane: its pin moves after its pinned TTL", "lane", lane, "error", err)
	}
}

func (w *Worker) laneStatsSnapshot() map[string]*laneStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.stats)
}
