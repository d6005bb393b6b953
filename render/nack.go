package render

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/planner"
)

// NACK (the NATS controller for Kubernetes) and the version whose CRDs
// (deploy/crds.yml) the output is checked against. Its Consumer has no
// priority groups and no pause: what a design needs beyond that is refused.
const (
	NACKVersion    = "v0.16.2"
	NACKAPIVersion = "jetstream.nats.io/v1beta2"
)

// maxObjectName is Kubernetes' limit on an object name (a DNS-1123 subdomain).
const maxObjectName = 253

// nackObject is one Kubernetes resource of NACK's.
type nackObject struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   nackMetadata `json:"metadata"`
	Spec       any          `json:"spec"`
}

type nackMetadata struct {
	Name string `json:"name"`
}

// nackStream is a Stream's spec: the plan's stream config under NACK's
// field names. Storage and allowDirect are always written: NACK's
// defaults (memory, false) are not the plan's.
type nackStream struct {
	Name             string         `json:"name"`
	Description      string         `json:"description,omitempty"`
	Subjects         []string       `json:"subjects"`
	Retention        string         `json:"retention"`
	Storage          string         `json:"storage"`
	Replicas         int            `json:"replicas"`
	MaxConsumers     int            `json:"maxConsumers"`
	MaxMsgs          int64          `json:"maxMsgs"`
	MaxBytes         int64          `json:"maxBytes"`
	MaxAge           string         `json:"maxAge,omitempty"` // "" is unlimited, as max_age 0
	MaxMsgSize       int32          `json:"maxMsgSize"`
	Discard          string         `json:"discard"`
	AllowDirect      bool           `json:"allowDirect"`
	SubjectTransform *nackTransform `json:"subjectTransform,omitempty"`
	// PreventDelete: lanes never deletes a stream, and deleting the
	// resource would delete every message with it.
	PreventDelete bool `json:"preventDelete"`
}

type nackTransform struct {
	Source string `json:"source"`
	Dest   string `json:"dest"`
}

// nackConsumer is a Consumer's spec: one lane. Durations are Go duration
// strings, as NACK parses them (time.ParseDuration).
type nackConsumer struct {
	StreamName    string            `json:"streamName"`
	DurableName   string            `json:"durableName"`
	Description   string            `json:"description,omitempty"`
	DeliverPolicy string            `json:"deliverPolicy"`
	OptStartSeq   uint64            `json:"optStartSeq,omitempty"`
	AckPolicy     string            `json:"ackPolicy"`
	AckWait       string            `json:"ackWait"`
	MaxDeliver    int               `json:"maxDeliver"`
	Backoff       []string          `json:"backoff,omitempty"`
	FilterSubject string            `json:"filterSubject"`
	ReplayPolicy  string            `json:"replayPolicy"`
	MaxWaiting    int               `json:"maxWaiting"`
	MaxAckPending int               `json:"maxAckPending"`
	Replicas      int               `json:"replicas,omitempty"` // 0 follows the stream, in NACK too
	Metadata      map[string]string `json:"metadata"`
	// PreventDelete: deleting the resource leaves the lane; lanes apply
	// deletes lanes, and only once they are drained (a repartition, --prune).
	PreventDelete bool `json:"preventDelete"`
}

// nackDeliverPolicy names the JetStream API's deliver policies as NACK does.
var nackDeliverPolicy = map[string]string{"all": "all", "last": "last", "new": "new", "by_start_sequence": "byStartSequence"}

// NACK writes the plan's stream and lanes as NACK resources: a YAML
// stream of one Stream and one Consumer per lane, for kubectl apply,
// after a comment block that says what NACK cannot do for lanes. A
// design NACK cannot express (pinned or key-parallel lanes: NACK has no
// priority groups) is refused, with nothing written.
func NACK(w io.Writer, p *planner.Plan) error {
	if err := nackExpressible(p.Design); err != nil {
		return err
	}
	objs, err := nackObjects(p)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	nackHeader(&buf, p)
	for i, o := range objs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		if err := YAML(&buf, o); err != nil {
			return err
		}
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// nackExpressible refuses what NACK's Consumer cannot declare. Emitting
// the lanes without it would not fail: NACK would create them unpinned.
func nackExpressible(d planner.Design) error {
	const way = "create and change these lanes with lanes apply (from CI or a Kubernetes Job): see docs/kubernetes.md"
	if d.Lane.KeysInFlight > 1 {
		return &planner.FieldError{Field: "lane.keys_in_flight", Value: strconv.Itoa(d.Lane.KeysInFlight), Origin: d.Origin["lane.keys_in_flight"],
			Reason: fmt.Sprintf("-o nack cannot declare key-parallel lanes: they need their pinned priority group, and NACK %s's Consumer (%s) has no priority groups, so NACK would create them without it (lanes work refuses such a lane); %s", NACKVersion, NACKAPIVersion, way)}
	}
	if d.Lane.Pinned {
		return &planner.FieldError{Field: "lane.pinned", Value: "true", Origin: d.Origin["lane.pinned"],
			Reason: fmt.Sprintf("-o nack cannot declare pinned lanes: NACK %s's Consumer (%s) has no priority groups, so NACK would create them unpinned, without the failover to one worker per lane; %s", NACKVersion, NACKAPIVersion, way)}
	}
	return nil
}

func nackObjects(p *planner.Plan) ([]nackObject, error) {
	s := p.Stream
	name, err := objectName(s.Name)
	if err != nil {
		return nil, &planner.FieldError{Field: "stream.name", Value: s.Name, Origin: p.Design.Origin["stream.name"], Reason: "-o nack: " + err.Error()}
	}
	spec := nackStream{
		Name: s.Name, Description: s.Description, Subjects: s.Subjects, Retention: s.Retention,
		Storage: s.Storage, Replicas: s.Replicas, MaxConsumers: s.MaxConsumers,
		MaxMsgs: s.MaxMsgs, MaxBytes: s.MaxBytes, MaxMsgSize: s.MaxMsgSize,
		Discard: s.Discard, AllowDirect: s.AllowDirect, PreventDelete: true,
	}
	if s.MaxAge > 0 {
		spec.MaxAge = time.Duration(s.MaxAge).String()
	}
	if t := s.SubjectTransform; t != nil {
		spec.SubjectTransform = &nackTransform{Source: t.Source, Dest: t.Destination}
	}
	objs := []nackObject{{APIVersion: NACKAPIVersion, Kind: "Stream", Metadata: nackMetadata{Name: name}, Spec: spec}}
	for _, c := range p.Consumers {
		name, err := objectName(c.Durable)
		if err != nil {
			return nil, &planner.FieldError{Field: "name", Value: p.Design.Name, Origin: p.Design.Origin["name"], Reason: fmt.Sprintf("-o nack: lane %s: %v", c.Durable, err)}
		}
		policy, ok := nackDeliverPolicy[c.DeliverPolicy]
		if !ok {
			return nil, fmt.Errorf("-o nack: lane %s: deliver policy %q has no NACK equivalent", c.Durable, c.DeliverPolicy)
		}
		spec := nackConsumer{
			StreamName: s.Name, DurableName: c.Durable, Description: c.Description,
			DeliverPolicy: policy, OptStartSeq: c.OptStartSeq, AckPolicy: c.AckPolicy,
			AckWait: c.AckWait.String(), MaxDeliver: c.MaxDeliver, FilterSubject: c.FilterSubject,
			ReplayPolicy: c.ReplayPolicy, MaxWaiting: c.MaxWaiting, MaxAckPending: c.MaxAckPending,
			Replicas: c.Replicas, Metadata: c.Metadata, PreventDelete: true,
		}
		for _, b := range c.BackOff {
			spec.Backoff = append(spec.Backoff, b.String())
		}
		objs = append(objs, nackObject{APIVersion: NACKAPIVersion, Kind: "Consumer", Metadata: nackMetadata{Name: name}, Spec: spec})
	}
	return objs, nil
}

// objectName makes a Kubernetes object name (a DNS-1123 subdomain: lower
// case letters, digits, '-' and '.', starting and ending with a letter or
// digit) from a stream or lane name: ORDERS -> orders. The spec keeps the
// real name.
func objectName(s string) (string, error) {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	name := strings.TrimRight(b.String(), "-")
	switch {
	case name == "":
		return "", fmt.Errorf("no Kubernetes object name can be made from %q (it needs a letter or digit a-z, 0-9)", s)
	case len(name) > maxObjectName:
		return "", fmt.Errorf("%q is longer than %d characters, the limit of a Kubernetes object name", s, maxObjectName)
	}
	return name, nil
}

// nackHeader is the comment block at the top of the output: what the
// resources are, and what NACK cannot do for lanes, in short (in full:
// docs/kubernetes.md).
func nackHeader(w io.Writer, p *planner.Plan) {
	d := p.Design
	lanes := p.Lanes[0].Name
	if len(p.Lanes) > 1 {
		lanes += " .. " + p.Lanes[len(p.Lanes)-1].Name
	}
	lines := []string{
		fmt.Sprintf("lanes design %q as NACK resources: stream %s and %d lanes", d.Name, d.Stream.Name, len(p.Lanes)),
		fmt.Sprintf("(%s), for NACK %s (%s).", lanes, NACKVersion, NACKAPIVersion),
		"Apply with kubectl apply -f FILE. The resources name no server: NACK",
		"connects with its own settings (or add spec.servers or spec.account).",
		"",
		"What NACK cannot do for lanes (docs/kubernetes.md):",
		"- A repartition (another partition count) is not one declarative step:",
		"  the old lanes must drain before they are deleted, and NACK creates and",
		"  deletes consumers at once. Run it with lanes apply (CI or a Kubernetes",
		"  Job), then replace these resources with the new count's",
		"  (lanes plan -o nack --partitions N).",
		"- Pinned and key-parallel lanes: NACK's Consumer has no priority groups",
		"  (lanes plan -o nack refuses such a design: use lanes apply).",
		"- A NACK update replaces the whole config, dropping what apply adds: a",
		"  lane's pause and metadata keys, the stream's metadata (lanes.generation.*).",
		"  A lane apply created at a start sequence (a repartition's new lanes,",
		"  --recreate) refuses NACK's deliverPolicy all: its resource shows Errored.",
		"- preventDelete: true: deleting a resource leaves its stream or lane on",
		"  the server (lanes apply deletes lanes once drained); drop it to let NACK",
		"  delete them.",
	}
	if d.Mapping == planner.MappingAccount {
		lines = append(lines,
			"- mapping: account: the stream stores the partitioned subjects; no NACK",
			"  resource installs the mapping. Install it on every server before the",
			"  first publish: lanes plan -o conf (server config) or -o nsc (operator",
			"  mode). The mapping:",
			"    "+p.Mapping.Source+" -> "+p.Mapping.Destination,
		)
	}
	for _, l := range lines {
		if l == "" {
			fmt.Fprintln(w, "#")
		} else {
			fmt.Fprintln(w, "# "+l)
		}
	}
}
