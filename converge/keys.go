package converge

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/planner"
)

// Key-parallel lanes (lane.keys_in_flight above 1) are ordinary lanes to
// apply: a change of K changes the lane's max ack pending, description,
// lanes.keys_in_flight tag and pinned-client priority group, all of which
// the server updates in place (checkNewConsumerConfig in nats-server's
// consumer.go refuses none of them), so the lane keeps its position. What
// apply checks is the server: a key-parallel lane is pinned (a
// pinned-client priority group), nats-server 2.11 or newer.

// KeysInFlightChange is a lane's keys in flight before and after an
// update (1: a serial lane).
type KeysInFlightChange struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// keysInFlightOf is the keys in flight a lane's metadata says: 1 unless
// its lanes.keys_in_flight tag says more.
func keysInFlightOf(metadata map[string]string) int {
	k, err := strconv.Atoi(metadata[planner.MetaKeysInFlight])
	if err != nil || k < 1 {
		return 1
	}
	return k
}

// keysInFlightChange compares a live lane's keys in flight with the
// wanted ones; nil when they are the same.
func keysInFlightChange(live, want map[string]string) *KeysInFlightChange {
	from, to := keysInFlightOf(live), keysInFlightOf(want)
	if from == to {
		return nil
	}
	return &KeysInFlightChange{From: from, To: to}
}

// KeysInFlightVersion is the oldest nats-server a key-parallel lane works
// on: 2.11 brought pinned-client priority groups, with which the server
// delivers a lane's messages to its one owner only.
var KeysInFlightVersion = ServerVersion{2, 11, 0}

// ServerVersion is a nats-server release, major.minor.patch.
type ServerVersion struct{ Major, Minor, Patch int }

func (v ServerVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders releases.
func (v ServerVersion) Less(o ServerVersion) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// parseServerVersion reads a server's version as INFO and the _nats.ver
// metadata give it: "2.11.0", maybe with a pre-release ("2.11.0-beta.2")
// or build ("+abc") suffix, or a leading "v". pre says a pre-release:
// semver orders it before its release, and so does the gate (a 2.11.0
// beta may predate pinned groups). ok is false for anything else.
func parseServerVersion(s string) (v ServerVersion, pre, ok bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	core, suffix, hasSuffix := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 || hasSuffix && suffix == "" {
		return ServerVersion{}, false, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || strings.Trim(p, "0123456789") != "" {
			return ServerVersion{}, false, false // not digits only: "+1", " 1"
		}
		n[i] = x
	}
	return ServerVersion{n[0], n[1], n[2]}, hasSuffix, true
}

// versionTooOld says why a server of version cannot serve key-parallel
// lanes ("" when it can): too old, a pre-release of the first release
// that can, or a version that cannot be read (refused: the gate cannot
// tell).
func versionTooOld(version string) string {
	v, pre, ok := parseServerVersion(version)
	need := KeysInFlightVersion
	switch {
	case !ok:
		return fmt.Sprintf("cannot read the server version %q", planner.Printable(version, 60))
	case v.Less(need):
		return fmt.Sprintf("found %s", v)
	case pre && v == need:
		return fmt.Sprintf("found %s, a pre-release of %s (older than the release)", planner.Printable(version, 60), need)
	}
	return ""
}

// serverVersion is the lowest nats-server version the diff can learn
// without a request: the connected server's (INFO) and the stream
// leader's (the _nats.ver of the STREAM.INFO answer, when the stream
// exists). The reset runs on a lane's leader, which is one of the
// stream's servers; a client learns the other servers' versions only
// with the system account ($SYS.REQ.SERVER.PING), which apply does not
// otherwise need. A cluster with older servers among newer ones is a
// rolling upgrade in progress; lanes work refuses a take-over that the
// server cannot reset. where names the server the version is from.
func (d *Diff) serverVersion() (version, where string, known bool) {
	type seen struct{ version, where string }
	var all []seen
	if v := d.live.Topology.Version; v != "" {
		all = append(all, seen{v, "the connected server"})
	}
	if s := d.live.Stream; s != nil && s.Metadata[serverVersionKey] != "" {
		all = append(all, seen{s.Metadata[serverVersionKey], "the stream's leader"})
	}
	if len(all) == 0 {
		return "", "", false
	}
	low := all[0]
	for _, s := range all[1:] {
		a, _, aok := parseServerVersion(low.version)
		b, _, bok := parseServerVersion(s.version)
		if !bok || aok && b.Less(a) {
			low = s // an unreadable version is the one to report
		}
	}
	return low.version, low.where, true
}

// serverVersionKey is the metadata key with which the server names its
// version in its answers.
const serverVersionKey = "_nats.ver"

// checkKeysInFlight refuses a key-parallel design on a server too old for
// it, before anything is written. A Live made by hand (no topology, no
// stream version) is not checked.
func (d *Diff) checkKeysInFlight() {
	l := d.plan.Design.Lane
	if l.KeysInFlight <= 1 {
		return
	}
	version, where, known := d.serverVersion()
	if !known {
		if d.live.Topology.Servers == 0 {
			return
		}
		version, where = "", "the connected server"
	}
	why := versionTooOld(version)
	if why == "" {
		return
	}
	e := &planner.FieldError{Field: "lane.keys_in_flight", Value: strconv.Itoa(l.KeysInFlight), Origin: d.plan.Design.Origin["lane.keys_in_flight"],
		Reason: fmt.Sprintf("key-parallel lanes need nats-server %s or newer (pinned-client priority groups: the server delivers a key-parallel lane's messages to its one owner only); %s (%s). Upgrade the servers, or keep lane.keys_in_flight at 1",
			KeysInFlightVersion, why, where)}
	d.refuse(e.Error())
}
