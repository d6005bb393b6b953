package planner

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Plan is the complete, reviewable result of planning: everything apply
// will converge a server to, and everything plan prints.
type Plan struct {
	Design    Design           `json:"design"`
	Layout    *Layout          `json:"-"`
	Mapping   Mapping          `json:"mapping"`
	Stream    StreamConfig     `json:"stream"`
	Consumers []ConsumerConfig `json:"consumers"`
	Lanes     []Lane           `json:"lanes"`
	Warnings  []string         `json:"warnings,omitempty"`
}

// Mapping is the server subject mapping that partitions publishes.
type Mapping struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Where       string `json:"where"` // stream or account
}

// Lane is one partition's serial consumer.
type Lane struct {
	Name      string `json:"name"`
	Partition int    `json:"partition"`
	Filter    string `json:"filter"`
}

// StreamConfig is a stream definition in the JetStream API's JSON form,
// limited to what lanes decides. natscli accepts it: nats stream add --config.
type StreamConfig struct {
	Name             string            `json:"name"`
	Description      string            `json:"description,omitempty"`
	Subjects         []string          `json:"subjects"`
	Retention        string            `json:"retention"`
	MaxConsumers     int               `json:"max_consumers"`
	MaxMsgs          int64             `json:"max_msgs"`
	MaxBytes         int64             `json:"max_bytes"`
	MaxAge           int64             `json:"max_age"`
	MaxMsgSize       int32             `json:"max_msg_size"`
	Storage          string            `json:"storage"`
	Discard          string            `json:"discard"`
	Replicas         int               `json:"num_replicas"`
	AllowDirect      bool              `json:"allow_direct"`
	SubjectTransform *SubjectTransform `json:"subject_transform,omitempty"`
}

// SubjectTransform is the stream-side mapping (server 2.10+).
type SubjectTransform struct {
	Source      string `json:"src"`
	Destination string `json:"dest"`
}

// ConsumerConfig is a lane definition in the JetStream API's JSON form.
// natscli accepts it: nats consumer add STREAM --config lane.json.
type ConsumerConfig struct {
	Durable         string            `json:"durable_name"`
	Description     string            `json:"description,omitempty"`
	DeliverPolicy   string            `json:"deliver_policy"`
	OptStartSeq     uint64            `json:"opt_start_seq,omitempty"`
	AckPolicy       string            `json:"ack_policy"`
	AckWait         time.Duration     `json:"ack_wait"`
	MaxDeliver      int               `json:"max_deliver"`
	BackOff         []time.Duration   `json:"backoff,omitempty"`
	FilterSubject   string            `json:"filter_subject,omitempty"`
	ReplayPolicy    string            `json:"replay_policy"`
	MaxWaiting      int               `json:"max_waiting"`
	MaxAckPending   int               `json:"max_ack_pending"`
	Replicas        int               `json:"num_replicas"`
	Metadata        map[string]string `json:"metadata"`
	PriorityGroups  []string          `json:"priority_groups,omitempty"`
	PriorityPolicy  string            `json:"priority_policy,omitempty"`
	PriorityTimeout time.Duration     `json:"priority_timeout,omitempty"`
	PauseUntil      *time.Time        `json:"pause_until,omitempty"`
}

// PinnedGroup is the priority group lanes use for pinned workers.
const PinnedGroup = "lane"

// New validates a design and plans it.
func New(d Design) (*Plan, error) {
	p, err := Outline(d)
	if err != nil {
		return nil, err
	}
	for i := 0; i < p.Design.Partitions; i++ {
		lane := Lane{Name: LaneName(p.Design.Name, p.Design.Partitions, i), Partition: i, Filter: p.Layout.Filter(i)}
		p.Lanes = append(p.Lanes, lane)
		p.Consumers = append(p.Consumers, p.consumerConfig(lane))
	}
	return p, nil
}

// Outline is New without the lanes: every check, the names, the stream,
// the mapping and the warnings, for a caller that needs no more (lanes
// work at 16,384 lanes saves 0.2 s of its start).
func Outline(d Design) (*Plan, error) {
	d, warnings, err := d.Normalize()
	if err != nil {
		return nil, err
	}
	dest := string(d.Destination)
	if dest == "" {
		dest = defaultDestination(d.Subject, d.Prefix, d.Partitions, d.KeyTokens)
	}
	layout, err := ParseLayout(d.Subject, dest)
	if err != nil {
		return nil, d.fieldErr("destination", dest, "%s", err)
	}
	if d.Destination != "" {
		// An adopted mapping decides the partitioning; the design must agree.
		if layout.Partitions != d.Partitions && d.isSet("partitions") {
			return nil, d.fieldErr("partitions", strconv.Itoa(d.Partitions), "disagrees with the destination's partition(%d, ...)", layout.Partitions)
		}
		d.Partitions, d.KeyTokens = layout.Partitions, layout.KeyTokens
	}
	p := &Plan{
		Design:   d,
		Layout:   layout,
		Mapping:  Mapping{Source: d.Subject, Destination: dest, Where: d.Mapping},
		Warnings: warnings,
	}
	p.Stream = p.streamConfig()
	return p, nil
}

// LaneName is "<design>-n<partitions>-<partition>", the partition zero-padded
// so lanes sort in order. The partition count in the name lets old and new
// lanes live side by side during a repartition.
func LaneName(design string, partitions, partition int) string {
	width := len(strconv.Itoa(partitions - 1))
	if width < 2 {
		width = 2
	}
	return fmt.Sprintf("%s-%s-%0*d", design, Generation(partitions), width, partition)
}

func (p *Plan) streamConfig() StreamConfig {
	d := p.Design
	s := StreamConfig{
		Name:         d.Stream.Name,
		Description:  fmt.Sprintf("lanes design %s: %s in %d ordered lanes", d.Name, d.Subject, d.Partitions),
		Retention:    d.Stream.Retention,
		MaxConsumers: StreamMaxConsumers(d),
		MaxMsgs:      -1,
		MaxBytes:     -1,
		MaxMsgSize:   -1,
		Storage:      d.Stream.Storage,
		Discard:      "old",
		Replicas:     d.Stream.Replicas,
		// Direct gets let inspect read each lane's head message without
		// queueing behind the JetStream API (set at creation only).
		AllowDirect: true,
	}
	if d.Mapping == MappingStream {
		s.Subjects = []string{d.Subject}
		s.SubjectTransform = &SubjectTransform{Source: d.Subject, Destination: p.Mapping.Destination}
	} else {
		s.Subjects = []string{p.Layout.Pattern()}
	}
	return s
}

// StreamMaxConsumers is the design's max_consumers, or by default room for
// the lanes twice over (old and new side by side during a repartition) and
// never below the server's own default of 1000.
func StreamMaxConsumers(d Design) int {
	if d.Stream.MaxConsumers != 0 {
		return d.Stream.MaxConsumers
	}
	return max(serverMaxConsumers, 2*d.Partitions)
}

func (p *Plan) consumerConfig(lane Lane) ConsumerConfig {
	d := p.Design
	c := ConsumerConfig{
		Durable:       lane.Name,
		Description:   fmt.Sprintf("lanes %s: serial lane for partition %d of %d", d.Name, lane.Partition, d.Partitions),
		DeliverPolicy: "all",
		AckPolicy:     "explicit",
		AckWait:       d.Lane.AckWait.D(),
		MaxDeliver:    d.Lane.MaxDeliver,
		FilterSubject: lane.Filter,
		ReplayPolicy:  "instant",
		MaxWaiting:    d.Lane.MaxWaiting,
		MaxAckPending: d.Lane.MaxAckPending,
		Replicas:      d.Lane.Replicas,
		Metadata: map[string]string{
			MetaDesign:      d.Name,
			MetaPartition:   strconv.Itoa(lane.Partition),
			MetaPartitions:  strconv.Itoa(d.Partitions),
			MetaSource:      p.Mapping.Source,
			MetaDestination: p.Mapping.Destination,
		},
	}
	for _, b := range d.Lane.BackOff {
		c.BackOff = append(c.BackOff, b.D())
	}
	if d.Lane.KeysInFlight > 1 {
		c.Description = fmt.Sprintf("lanes %s: key-parallel lane (%d keys in flight) for partition %d of %d", d.Name, d.Lane.KeysInFlight, lane.Partition, d.Partitions)
		c.Metadata[MetaKeysInFlight] = strconv.Itoa(d.Lane.KeysInFlight)
	}
	if d.Lane.Pinned {
		c.PriorityGroups = []string{PinnedGroup}
		c.PriorityPolicy = "pinned_client"
		c.PriorityTimeout = d.Lane.PinnedTTL.D()
	}
	return c
}

// LaneOf returns the lane a published subject belongs to.
func (p *Plan) LaneOf(subject string) (Lane, bool) {
	part, ok := p.Layout.PartitionOf([]byte(subject))
	if !ok {
		return Lane{}, false
	}
	return p.Lanes[part], true
}

// SubjectForKey builds a published subject carrying key: the key's tokens
// (joined by '.') go into the key positions, other '*' tokens get "x".
func (p *Plan) SubjectForKey(key string) (string, error) {
	l := p.Layout
	parts := strings.Split(key, ".")
	if len(parts) != len(l.KeyTokens) {
		return "", fmt.Errorf("key %q has %d token(s); the design's key has %d", key, len(parts), len(l.KeyTokens))
	}
	wild := make([]string, len(l.wildPos))
	for i := range wild {
		wild[i] = "x"
	}
	for i, k := range l.KeyTokens {
		if parts[i] == "" || strings.ContainsAny(parts[i], " \t\r\n*>") {
			return "", fmt.Errorf("key %q: token %q cannot be a subject token", key, parts[i])
		}
		wild[k-1] = parts[i]
	}
	out := make([]string, len(l.srcTokens))
	w := 0
	for i, t := range l.srcTokens {
		if t == "*" {
			t = wild[w]
			w++
		}
		out[i] = t
	}
	return strings.Join(out, "."), nil
}
