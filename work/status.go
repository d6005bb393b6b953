package work

import (
	"time"
)

// Stats is a snapshot of a worker, for its status line.
type Stats struct {
	Instance   string
	Members    int // live instances of the design, this one included
	Lanes      int // lanes of the design on the stream
	Refused    int // lanes of the design not served (e.g. max ack pending above 1)
	Serving    int // lanes this instance serves now
	Processed  uint64
	Failed     uint64
	Parked     uint64
	Terminated uint64
	// HandedBack counts messages given back unfinished (nak) on an abort,
	// at the end of the grace period or on a hand-over; Unconfirmed those
	// whose ack, term or park the server did not confirm (they run again).
	HandedBack  uint64
	Unconfirmed uint64
	InFlight    int
	Oldest      time.Duration // age of the oldest message in flight
	// Outages counts the lanes whose message waits because the handler
	// could not run (see Outages); OutageSince is when the oldest of them
	// began, OutageReason its last error.
	Outages      int
	OutageSince  time.Time
	OutageReason string
	// Key-parallel lanes (keys in flight above 1) this instance serves:
	// their windows' places (Window) and the messages out in them (Held),
	// the keys with a message running, and the message that has waited
	// longest behind its key (OldestWaiting, its key OldestWaitingKey).
	Window           int
	Held             int
	KeysRunning      int
	OldestWaiting    time.Duration
	OldestWaitingKey string
	// Holders are the key-parallel lanes one key fills: lane -> key.
	Holders map[string]string
}

// Stats reads the worker's counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	st := Stats{Instance: w.cfg.Instance, Members: len(w.members), Lanes: len(w.lanes), Refused: len(w.refused)}
	for name, s := range w.stats {
		if win := s.window.Load(); win != nil {
			st.Window += win.Size
			st.Held += win.Held
			st.KeysRunning += win.RunningCount
			if o := win.Oldest; o != nil && now.Sub(o.Since) > st.OldestWaiting {
				st.OldestWaiting, st.OldestWaitingKey = now.Sub(o.Since), o.Key
			}
			if win.Holder != "" {
				if st.Holders == nil {
					st.Holders = map[string]string{}
				}
				st.Holders[name] = win.Holder
			}
		}
		st.Processed += s.processed.Load()
		st.Failed += s.failed.Load()
		st.Parked += s.parked.Load()
		st.Terminated += s.terminated.Load()
		st.HandedBack += s.handedBack.Load()
		st.Unconfirmed += s.unconfirmed.Load()
		if s.serving.Load() {
			st.Serving++
		}
		if age := s.inFlightAge(now); age > 0 {
			st.InFlight++
			st.Oldest = max(st.Oldest, age)
		}
		if o := s.outage.Load(); o != nil {
			st.Outages++
			if st.OutageSince.IsZero() || o.Since.Before(st.OutageSince) {
				st.OutageSince, st.OutageReason = o.Since, o.Reason
			}
		}
	}
	return st
}

// RecordEvery is how often a lane's record is rewritten with the last
// message processed, at most, while messages are processed.
const RecordEvery = 10 * time.Second

// SlowAfter is how long a message runs before its lane's record says so:
// ten times the lane's usual processing time, and 10 s at least.
func SlowAfter(usual time.Duration) time.Duration { return max(10*usual, 10*time.Second) }
