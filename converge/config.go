package converge

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/planner"
)

// heldValue is what apply writes under planner.MetaHeld.
const heldValue = "repartition"

// heldUntil is the pause of a held lane: far enough to mean "until apply
// resumes it", a fixed value so that re-runs write the same config.
var heldUntil = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// immutableFields are the design's fields the server refuses to update
// (checkNewConsumerConfig in nats-server's consumer.go).
var immutableFields = map[string]string{
	"deliver_policy":  "deliver policy",
	"opt_start_seq":   "start sequence",
	"ack_policy":      "ack policy",
	"replay_policy":   "replay policy",
	"max_waiting":     "max waiting",
	"deliver_subject": "push/pull",
}

// laneFields are the JSON names of the consumer fields the design decides,
// in declaration order: the only fields apply compares and writes.
var laneFields = jsonFields(reflect.TypeOf(planner.ConsumerConfig{}))

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// designed reads a live consumer config as the design's type: marshalled
// and read back, it keeps only the fields lanes decides, with API names.
func designed(c jetstream.ConsumerConfig) planner.ConsumerConfig {
	var out planner.ConsumerConfig
	b, _ := json.Marshal(c)
	_ = json.Unmarshal(b, &out)
	return out
}

// toMap is v's JSON object, field by field.
func toMap(v any) map[string]json.RawMessage {
	b := marshal(v)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	return m
}

func raw(v any) json.RawMessage { return marshal(v) }

// marshal is json.Marshal without HTML escaping: the values end up in
// apply's JSON output (a change's old and new), where a subject's "<"
// must read as itself, not as \u003c.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// consumerChanges compares a live lane with the wanted config, field by
// field, for the fields the design decides. It ignores what the design
// does not decide: server metadata (_nats.*) and other tools' metadata
// keys, pauses (holds and operators' pauses are handled apart), and a
// start sequence set by an earlier recreate (equivalent to deliver all).
func consumerChanges(live jetstream.ConsumerConfig, want planner.ConsumerConfig) []FieldChange {
	got := designed(live)
	if got.DeliverPolicy == "by_start_sequence" && want.DeliverPolicy == "all" {
		got.DeliverPolicy, got.OptStartSeq = "all", 0
	}
	got.PauseUntil, want.PauseUntil = nil, nil
	got.Metadata = designKeys(got.Metadata, want.Metadata)
	if live.DeliverSubject == "" && reflect.DeepEqual(got, want) {
		return nil // the common case, without comparing field by field
	}
	a, b := toMap(got), toMap(want)
	var out []FieldChange
	for _, f := range laneFields {
		if f == "metadata" {
			out = append(out, metadataChanges(got.Metadata, want.Metadata)...)
			continue
		}
		if !jsonEqual(a[f], b[f]) {
			_, immutable := immutableFields[f]
			out = append(out, FieldChange{Field: f, Old: orNull(a[f]), New: orNull(b[f]), Immutable: immutable})
		}
	}
	if live.DeliverSubject != "" {
		out = append(out, FieldChange{Field: "deliver_subject", Old: raw(live.DeliverSubject), New: orNull(nil), Immutable: true})
	}
	return out
}

// optionalTags are lane tags a design writes only on some lanes: a lane
// that has one the design no longer wants loses it (a key-parallel lane
// made serial again must not stay tagged with its old keys in flight).
var optionalTags = []string{planner.MetaKeysInFlight}

// designKeys keeps the keys of m the design decides: those want has, and
// the optional tags. Not the server's (_nats.*), nor other tools'.
func designKeys(m, want map[string]string) map[string]string {
	out := make(map[string]string, len(want))
	for k := range want {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	for _, k := range optionalTags {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// metadataChanges compares the keys the design decides (designKeys): a
// key got has and want has not is removed (New null).
func metadataChanges(got, want map[string]string) []FieldChange {
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []FieldChange
	for _, k := range keys {
		old, had := got[k]
		nu, wanted := want[k]
		if had && wanted && old == nu {
			continue
		}
		fc := FieldChange{Field: "metadata." + k, Old: orNull(nil), New: orNull(nil)}
		if had {
			fc.Old = raw(old)
		}
		if wanted {
			fc.New = raw(nu)
		}
		out = append(out, fc)
	}
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b))
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// updateBody is the config to send to change a live lane into the wanted
// one: the live config (so settings the design does not decide stay as
// they are) with the design's fields replaced. The lane's name, start
// position and pause are kept: they are not the design's to change here.
func updateBody(live jetstream.ConsumerConfig, want planner.ConsumerConfig) map[string]json.RawMessage {
	body := toMap(live)
	w := toMap(want)
	for _, f := range laneFields {
		switch f {
		case "durable_name", "deliver_policy", "opt_start_seq", "pause_until":
			continue
		case "metadata":
			body[f] = raw(mergeMetadata(live.Metadata, want.Metadata))
			continue
		}
		if v, ok := w[f]; ok {
			body[f] = v
		} else {
			delete(body, f)
		}
	}
	return body
}

// mergeMetadata keeps other tools' keys and the design's; the server's own
// _nats.* keys are left for the server to write, and an optional tag the
// design does not want is dropped.
func mergeMetadata(live, want map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range live {
		if !strings.HasPrefix(k, "_nats.") && !slices.Contains(optionalTags, k) {
			out[k] = v
		}
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

// createBody is a new lane's config: from its generation's start (0 or 1:
// the beginning), held when a repartition is running.
func createBody(want planner.ConsumerConfig, held bool, start uint64) map[string]json.RawMessage {
	body := toMap(want)
	if start > 1 {
		body["deliver_policy"] = raw("by_start_sequence")
		body["opt_start_seq"] = raw(start)
		setMeta(body, planner.MetaStartSeq, strconv.FormatUint(start, 10))
	}
	if held {
		hold(body)
	}
	return body
}

// hold pauses a lane config until apply resumes it, and marks it so.
func hold(body map[string]json.RawMessage) {
	body["pause_until"] = raw(heldUntil)
	setMeta(body, planner.MetaHeld, heldValue)
}

// setMeta sets (or with "" removes) one metadata key of a config body.
func setMeta(body map[string]json.RawMessage, key, value string) {
	meta := map[string]string{}
	_ = json.Unmarshal(body["metadata"], &meta)
	if meta == nil {
		meta = map[string]string{}
	}
	if value == "" {
		delete(meta, key)
	} else {
		meta[key] = value
	}
	body["metadata"] = raw(meta)
}

// isHeld reports whether apply itself paused this lane for a repartition:
// its marker, or its pause date if apply stopped between the two.
func isHeld(c jetstream.ConsumerConfig) bool {
	return c.Metadata[planner.MetaHeld] == heldValue || (c.PauseUntil != nil && c.PauseUntil.Equal(heldUntil))
}

// backlog is what a lane still has to do: undelivered plus unacked.
func backlog(ci *jetstream.ConsumerInfo) int64 {
	return int64(ci.NumPending) + int64(ci.NumAckPending)
}

// drained reports whether a lane has nothing left to deliver or ack.
func drained(ci *jetstream.ConsumerInfo) bool { return ci.NumPending == 0 && ci.NumAckPending == 0 }

// positionOf is where a lane restarts if recreated: right after its ack
// floor, so nothing unacked is skipped; what was delivered but not acked
// is delivered again. Never before the lane's own start: in a cluster, a
// consumer created at a start sequence reports ack floor 0 until its first
// ack (a single server reports start - 1), and a lane recreated at 1 would
// deliver every message its subjects ever held again.
func positionOf(ci *jetstream.ConsumerInfo) *Position {
	start := ci.AckFloor.Stream + 1
	if ci.Config.DeliverPolicy == jetstream.DeliverByStartSequencePolicy {
		start = max(start, ci.Config.OptStartSeq)
	}
	start = max(start, laneStartSeq(ci.Config))
	return &Position{StartSeq: start, InFlight: ci.NumAckPending}
}
