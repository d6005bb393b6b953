package converge

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

func keysPlan(t *testing.T, k int) *planner.Plan {
	return testutil.PlanDesign(t, testutil.Seed(4), func(d *planner.Design) { d.Lane.KeysInFlight = k })
}

// TestComputeKeysInFlightChange: a change of lane.keys_in_flight, up,
// down, to and from 1, is an update of every lane (no field the server
// cannot update), named as such; the update sent keeps other tools'
// metadata and drops a keys_in_flight tag the design no longer wants.
func TestComputeKeysInFlightChange(t *testing.T) {
	for _, c := range []struct{ from, to int }{{1, 8}, {8, 32}, {32, 4}, {8, 1}, {2, 1}} {
		from, to := keysPlan(t, c.from), keysPlan(t, c.to)
		w := newWorld(t, from).lanes(from, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata["team"] = "payments" })
		d := Compute(to, w.live, Options{})
		wantCounts(t, d, map[Action]int{ActionUpdate: 4})
		if d.Refused() {
			t.Fatalf("%d -> %d refused: %v", c.from, c.to, d.Refusals)
		}
		for _, l := range d.Lanes {
			if l.KeysInFlight == nil || l.KeysInFlight.From != c.from || l.KeysInFlight.To != c.to {
				t.Fatalf("%d -> %d: lane %s keys in flight %+v", c.from, c.to, l.Name, l.KeysInFlight)
			}
			fields := map[string]FieldChange{}
			for _, fc := range l.Changes {
				if fc.Immutable {
					t.Fatalf("%d -> %d: %s is not an update: %+v", c.from, c.to, fc.Field, fc)
				}
				fields[fc.Field] = fc
			}
			if fc, ok := fields["max_ack_pending"]; !ok || string(fc.New) != jsonInt(c.to) {
				t.Fatalf("%d -> %d: max_ack_pending change %+v in %+v", c.from, c.to, fc, l.Changes)
			}
			tag, ok := fields["metadata."+planner.MetaKeysInFlight]
			switch {
			case !ok:
				t.Fatalf("%d -> %d: no tag change in %+v", c.from, c.to, l.Changes)
			case c.to == 1 && string(tag.New) != "null", c.from == 1 && string(tag.Old) != "null":
				t.Fatalf("%d -> %d: tag change %s -> %s", c.from, c.to, tag.Old, tag.New)
			}
			if _, ok := fields["metadata.team"]; ok {
				t.Fatalf("other tools' metadata is not the design's: %+v", l.Changes)
			}
			// To and from 1 the lane's pinned group comes or goes with it;
			// between two key-parallel values the lane stays pinned.
			if _, ok := fields["priority_policy"]; ok != ((c.from == 1) != (c.to == 1)) {
				t.Fatalf("%d -> %d: priority policy change %v in %+v", c.from, c.to, ok, l.Changes)
			}
		}
		l := d.Lanes[0]
		body := updateBody(l.live.Config, l.want)
		var meta map[string]string
		if err := json.Unmarshal(body["metadata"], &meta); err != nil {
			t.Fatal(err)
		}
		if v, ok := meta[planner.MetaKeysInFlight]; c.to == 1 && ok || c.to > 1 && v != strconv.Itoa(c.to) || meta["team"] != "payments" {
			t.Fatalf("%d -> %d: update metadata %v", c.from, c.to, meta)
		}
		if _, ok := body["priority_groups"]; ok != (c.to > 1) {
			t.Fatalf("%d -> %d: update body priority groups %s", c.from, c.to, body["priority_groups"])
		}
		// Once updated, the lanes compare as designed.
		after := newWorld(t, to).lanes(to, func(ci *jetstream.ConsumerInfo) { ci.Config.Metadata["team"] = "payments" })
		if d := Compute(to, after.live, Options{}); d.Pending() {
			t.Fatalf("%d -> %d: pending after the update: %+v", c.from, c.to, d.Lanes[0].Changes)
		}
	}
}

func jsonInt(k int) string { return string(raw(k)) }

// TestComputeKeysInFlightAbsentTagIsOne: a serial lane (no tag) compares
// as keys in flight 1: nothing to change for a K=1 design.
func TestComputeKeysInFlightAbsentTagIsOne(t *testing.T) {
	p := keysPlan(t, 1)
	d := Compute(p, newWorld(t, p).lanes(p).live, Options{})
	wantCounts(t, d, map[Action]int{ActionUnchanged: 4})
	if d.Lanes[0].KeysInFlight != nil {
		t.Fatalf("%+v", d.Lanes[0].KeysInFlight)
	}
}

// TestVersionTooOld: the version gate on version strings: the INFO and
// _nats.ver forms, pre-releases and garbage, which is refused (the gate
// cannot tell).
func TestVersionTooOld(t *testing.T) {
	for _, c := range []struct {
		version string
		ok      bool
		says    string
	}{
		{"2.11.0", true, ""},
		{"2.15.2", true, ""},
		{"v2.11.0", true, ""},
		{"2.11.1-RC.1", true, ""},
		{"2.11.0+build.7", true, ""},
		{"3.0.0", true, ""},
		{"2.10.9", false, "found 2.10.9"},
		{"2.10.22", false, "found 2.10.22"},
		{"1.99.99", false, "found 1.99.99"},
		{"2.11.0-beta", false, "a pre-release of 2.11.0"},
		{"2.11.0-RC.3", false, "a pre-release of 2.11.0"},
		{"", false, `cannot read the server version ""`},
		{"banana", false, "cannot read"},
		{"2.11", false, "cannot read"},
		{"2.11.x", false, "cannot read"},
		{"2.11.0-", false, "cannot read"},
		{"2.+14.0", false, "cannot read"},
		{"2.11.0.1", false, "cannot read"},
		{"99999999999999999999.0.0", false, "cannot read"},
		{"2.11.0\x1b[2J", false, `\x1b`},
	} {
		why := versionTooOld(c.version)
		if (why == "") != c.ok || !strings.Contains(why, c.says) {
			t.Errorf("%q: %q, want ok=%v saying %q", c.version, why, c.ok, c.says)
		}
	}
}

// TestComputeRefusesKeysInFlightOnOldServer: K > 1 on a server older than
// 2.11 is one refusal naming the field, the version found and the one
// needed, whether the connected server or the stream's leader is the old
// one; K = 1 is not checked, nor a newer server.
func TestComputeRefusesKeysInFlightOnOldServer(t *testing.T) {
	serial, keyed := keysPlan(t, 1), keysPlan(t, 8)
	keyed.Design.Origin = map[string]string{"lane.keys_in_flight": "lanes.yaml:9"}
	old := func(connected, leader string) *Live {
		live := newWorld(t, serial).lanes(serial).live
		live.Topology = Topology{Servers: 1, Version: connected}
		if leader != "" {
			live.Stream.Metadata = map[string]string{"_nats.ver": leader}
		}
		return live
	}
	for _, c := range []struct {
		name              string
		connected, leader string
		refused           bool
		says              []string
	}{
		{"connected server too old", "2.10.9", "", true, []string{"2.10.9 (the connected server)"}},
		{"stream leader too old", "2.15.2", "2.10.14", true, []string{"2.10.14 (the stream's leader)"}},
		{"unreadable version", "nonsense", "2.15.2", true, []string{`cannot read the server version "nonsense" (the connected server)`}},
		{"no version at all", "", "", true, []string{`cannot read the server version ""`}},
		{"new enough", "2.11.0", "2.15.2", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Compute(keyed, old(c.connected, c.leader), Options{})
			if d.Refused() != c.refused {
				t.Fatalf("refused %v: %v", d.Refused(), d.Refusals)
			}
			if !c.refused {
				return
			}
			if len(d.Refusals) != 1 {
				t.Fatalf("want one refusal: %v", d.Refusals)
			}
			r := d.Refusals[0]
			for _, s := range append(c.says, `lanes.yaml:9: lane.keys_in_flight "8"`, "nats-server 2.11.0 or newer", "keep lane.keys_in_flight at 1") {
				if !strings.Contains(r, s) {
					t.Errorf("refusal lacks %q: %s", s, r)
				}
			}
		})
	}
	if d := Compute(serial, old("2.11.0", "2.11.0"), Options{}); d.Refused() {
		t.Fatalf("a serial design on 2.11: %v", d.Refusals)
	}
	if d := Compute(keyed, &Live{Consumers: newWorld(t, keyed).live.Consumers}, Options{}); d.Refused() {
		t.Fatalf("a Live made by hand is not checked: %v", d.Refusals)
	}
}
