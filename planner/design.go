// Package planner turns a lane design into a Plan: the partition mapping,
// the stream and one serial lane consumer per partition. It is pure: no I/O,
// no clock, no network, so every rule here is checked by plain unit tests.
package planner

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Design is what a team decides. Zero values mean "use the default";
// Origin records which fields were set and where, for error messages.
type Design struct {
	Name        string         `yaml:"name" json:"name"`
	Subject     string         `yaml:"subject" json:"subject"`
	KeyTokens   []int          `yaml:"key_tokens" json:"key_tokens"`
	Partitions  int            `yaml:"partitions" json:"partitions"`
	Mapping     string         `yaml:"mapping" json:"mapping"`
	Prefix      string         `yaml:"prefix" json:"prefix,omitempty"`
	Destination Destination    `yaml:"destination" json:"destination,omitempty"`
	Account     string         `yaml:"account" json:"account,omitempty"`
	Stream      StreamSettings `yaml:"stream" json:"stream"`
	Lane        LaneSettings   `yaml:"lane" json:"lane"`

	// Origin maps a field path ("lane.ack_wait") to where it was set:
	// "lanes.yaml:12" for a file line, "--ack-wait" for a flag.
	Origin map[string]string `yaml:"-" json:"-"`
}

// StreamSettings are used when the stream must be created.
type StreamSettings struct {
	Name         string `yaml:"name" json:"name"`
	Storage      string `yaml:"storage" json:"storage"`
	Replicas     int    `yaml:"replicas" json:"replicas"`
	Retention    string `yaml:"retention" json:"retention"`
	MaxConsumers int    `yaml:"max_consumers" json:"max_consumers"`
}

// LaneSettings configure every lane consumer.
type LaneSettings struct {
	AckWait       Duration   `yaml:"ack_wait" json:"ack_wait"`
	MaxDeliver    int        `yaml:"max_deliver" json:"max_deliver"`
	BackOff       []Duration `yaml:"backoff" json:"backoff,omitempty"`
	MaxAckPending int        `yaml:"max_ack_pending" json:"max_ack_pending"`
	// KeysInFlight above 1 makes a key-parallel lane: up to that many
	// messages of distinct keys out at once, one per key (lanes work
	// gates the keys; the server caps the lane with max ack pending).
	KeysInFlight int      `yaml:"keys_in_flight" json:"keys_in_flight,omitempty"`
	MaxWaiting   int      `yaml:"max_waiting" json:"max_waiting"`
	Pinned       bool     `yaml:"pinned" json:"pinned"`
	PinnedTTL    Duration `yaml:"pinned_ttl" json:"pinned_ttl,omitempty"`
	Replicas     int      `yaml:"replicas" json:"replicas,omitempty"`
}

// Mapping modes: where the partition mapping lives.
const (
	MappingStream  = "stream"  // a stream SubjectTransform, set through the JetStream API
	MappingAccount = "account" // an account mapping the operator installs
)

// Defaults, chosen for ordered processing: one message out per lane.
const (
	DefaultPartitions    = 8
	DefaultAckWait       = 30 * time.Second
	DefaultMaxDeliver    = -1 // never drop a message silently; inspect flags a stuck lane
	DefaultMaxAckPending = 1
	DefaultKeysInFlight  = 1
	DefaultMaxWaiting    = 512
	DefaultPinnedTTL     = 2 * time.Minute
	DefaultStorage       = "file"
	DefaultRetention     = "limits"
	DefaultReplicas      = 1
	serverMaxConsumers   = 1000 // nats-server's default cap on consumers per stream
	maxNameLen           = 255
	maxDesignName        = 64 // lane names are built from it
)

// Duration is a time.Duration written as "30s" in files and JSON.
type Duration time.Duration

func (d Duration) D() time.Duration { return time.Duration(d) }
func (d Duration) String() string   { return time.Duration(d).String() }

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%q is not a duration (write it like 30s, 500ms or 2m)", string(b))
	}
	*d = Duration(v)
	return nil
}

// Destination is an explicit mapping destination, for adopting a mapping
// that already exists. Normally empty: the planner derives one.
type Destination string

// FieldError names the setting that is wrong, its value, and why.
type FieldError struct {
	Field  string // "lane.ack_wait"
	Value  string
	Reason string
	Origin string // "lanes.yaml:12", "--ack-wait" or empty
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Origin != "" {
		b.WriteString(e.Origin)
		b.WriteString(": ")
	}
	b.WriteString(e.Field)
	if e.Value != "" {
		fmt.Fprintf(&b, " %q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func (d *Design) fieldErr(field, value, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...), Origin: d.Origin[field]}
}

// isSet reports whether a field was given by a file or a flag.
func (d *Design) isSet(field string) bool {
	_, ok := d.Origin[field]
	return ok
}

// SetOrigin records where a field came from; flags call it to override a file.
func (d *Design) SetOrigin(field, origin string) {
	if d.Origin == nil {
		d.Origin = map[string]string{}
	}
	d.Origin[field] = origin
}

// Normalize fills defaults and validates. It returns the completed design
// and warnings (valid but risky choices), or the first error found.
func (d Design) Normalize() (Design, []string, error) {
	d.Origin = cloneOrigin(d.Origin)
	d.KeyTokens = append([]int(nil), d.KeyTokens...)
	d.Lane.BackOff = append([]Duration(nil), d.Lane.BackOff...)
	if err := d.fillDefaults(); err != nil {
		return d, nil, err
	}
	if err := d.validate(); err != nil {
		return d, nil, err
	}
	return d, d.warnings(), nil
}

func cloneOrigin(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (d *Design) fillDefaults() error {
	if d.Subject == "" {
		return d.fieldErr("subject", "", "required: the subject pattern publishers use, e.g. msgs.received_from.*")
	}
	switch {
	case d.Name == "" && d.Stream.Name == "":
		d.Name = nameFromSubject(d.Subject)
		if d.Name == "" {
			return d.fieldErr("name", "", "required: no name can be made from the subject's literal prefix: set a design name (--name) or a stream name (--stream)")
		}
		d.Stream.Name = strings.ToUpper(strings.ReplaceAll(d.Name, "-", "_"))
	case d.Name == "":
		d.Name = strings.ToLower(d.Stream.Name)
	case d.Stream.Name == "":
		d.Stream.Name = strings.ToUpper(strings.ReplaceAll(d.Name, "-", "_"))
	}
	if d.Partitions == 0 && !d.isSet("partitions") {
		d.Partitions = DefaultPartitions
	}
	if d.Mapping == "" {
		d.Mapping = MappingStream
	}
	if d.Stream.Storage == "" {
		d.Stream.Storage = DefaultStorage
	}
	if d.Stream.Retention == "" {
		d.Stream.Retention = DefaultRetention
	}
	if d.Stream.Replicas == 0 && !d.isSet("stream.replicas") {
		d.Stream.Replicas = DefaultReplicas
	}
	l := &d.Lane
	if l.AckWait == 0 && !d.isSet("lane.ack_wait") {
		l.AckWait = Duration(DefaultAckWait)
		if len(l.BackOff) > 0 {
			// The server replaces ack_wait with backoff[0]; say so in the plan.
			l.AckWait = l.BackOff[0]
		}
	}
	if l.MaxDeliver == 0 && !d.isSet("lane.max_deliver") {
		l.MaxDeliver = DefaultMaxDeliver
	}
	if l.KeysInFlight == 0 && !d.isSet("lane.keys_in_flight") {
		l.KeysInFlight = DefaultKeysInFlight
	}
	if l.KeysInFlight > 1 {
		// A key-parallel lane's window is its max ack pending, and it is
		// pinned: the server delivers to its one owner only.
		if d.isSet("lane.max_ack_pending") && l.MaxAckPending != l.KeysInFlight {
			return d.fieldErr("lane.max_ack_pending", fmt.Sprint(l.MaxAckPending), "is set beside lane.keys_in_flight (%d): a key-parallel lane's max ack pending is its keys in flight; drop max_ack_pending", l.KeysInFlight)
		}
		if d.isSet("lane.pinned") && !l.Pinned {
			return d.fieldErr("lane.pinned", "false", "cannot go with lane.keys_in_flight above 1: a key-parallel lane is pinned, so that the server delivers to its one owner only")
		}
		l.MaxAckPending, l.Pinned = l.KeysInFlight, true
	}
	if l.MaxAckPending == 0 && !d.isSet("lane.max_ack_pending") {
		l.MaxAckPending = DefaultMaxAckPending
	}
	if l.MaxWaiting == 0 && !d.isSet("lane.max_waiting") {
		l.MaxWaiting = DefaultMaxWaiting
	}
	if l.Pinned && l.PinnedTTL == 0 && !d.isSet("lane.pinned_ttl") {
		l.PinnedTTL = Duration(DefaultPinnedTTL)
	}
	return nil
}

// nameFromSubject is the default design name: the subject's literal tokens
// before the first '*', lower case, joined by '-' (msgs.received_from.* ->
// msgs-received_from); "" when there are none or they make no valid name.
func nameFromSubject(subject string) string {
	lit, _, _ := strings.Cut(subject, "*")
	name := strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(lit, "."), ".", "-"))
	if !validName(name) || len(name) > maxDesignName {
		return ""
	}
	return name
}

func (d *Design) validate() error {
	if err := d.validateNames(); err != nil {
		return err
	}
	w, err := d.validateSubject()
	if err != nil {
		return err
	}
	if err := d.validateKeyTokens(w); err != nil {
		return err
	}
	if err := CheckPartitions(d.Partitions); err != nil {
		return d.fieldErr("partitions", fmt.Sprint(d.Partitions), "%v", err)
	}
	if d.Mapping != MappingStream && d.Mapping != MappingAccount {
		return d.fieldErr("mapping", d.Mapping, "must be %q (a stream subject transform) or %q (an account mapping the operator installs)", MappingStream, MappingAccount)
	}
	if d.Prefix != "" {
		if !validSubject(d.Prefix) || strings.ContainsAny(d.Prefix, "*>") {
			return d.fieldErr("prefix", d.Prefix, "must be a literal subject prefix such as msgs.lanes (no wildcards)")
		}
		if d.Destination != "" {
			return d.fieldErr("prefix", d.Prefix, "cannot be combined with destination: the destination already fixes the layout")
		}
	}
	if err := d.validateStream(); err != nil {
		return err
	}
	return d.validateLane()
}

func (d *Design) validateNames() error {
	if !validName(d.Name) {
		return d.fieldErr("name", d.Name, "must be a non-empty name without spaces, '.', '*', '>', '/' or '\\'")
	}
	if len(d.Name) > maxDesignName {
		return d.fieldErr("name", d.Name, "longer than %d characters: lane names are built from it", maxDesignName)
	}
	if !validName(d.Stream.Name) {
		return d.fieldErr("stream.name", d.Stream.Name, "must be a non-empty stream name without spaces, '.', '*', '>', '/' or '\\'")
	}
	if len(d.Stream.Name) > maxNameLen {
		return d.fieldErr("stream.name", d.Stream.Name, "longer than %d characters", maxNameLen)
	}
	if d.Account != "" && strings.ContainsAny(d.Account, " \t\r\n\"") {
		return d.fieldErr("account", d.Account, "must be an account name without spaces or quotes")
	}
	return nil
}

// validateSubject checks the publish pattern and returns its number of * tokens.
func (d *Design) validateSubject() (int, error) {
	s := d.Subject
	if !validSubject(s) {
		return 0, d.fieldErr("subject", s, "not a valid NATS subject (empty token, space, or '>' before the end)")
	}
	w := 0
	for _, tok := range strings.Split(s, ".") {
		switch {
		case tok == ">":
			return 0, d.fieldErr("subject", s, "'>' cannot be used in a lane subject: each key must map to one partitioned subject; use one '*' per key token")
		case tok == "*":
			w++
		case strings.ContainsAny(tok, "*>"):
			return 0, d.fieldErr("subject", s, "token %q mixes a wildcard with text; '*' must be a whole token", tok)
		}
	}
	if w == 0 {
		return 0, d.fieldErr("subject", s, "has no '*' token: there is no key to partition on (e.g. msgs.received_from.*)")
	}
	return w, nil
}

func (d *Design) validateKeyTokens(w int) error {
	if len(d.KeyTokens) == 0 {
		for i := 1; i <= w; i++ {
			d.KeyTokens = append(d.KeyTokens, i)
		}
		return nil
	}
	seen := map[int]bool{}
	for _, k := range d.KeyTokens {
		v := fmt.Sprint(k)
		switch {
		case k < 1:
			return d.fieldErr("key_tokens", v, "token positions are 1-based, counting the '*' tokens of the subject (like partition(n, 1))")
		case k > w:
			return d.fieldErr("key_tokens", v, "the subject %s has only %d '*' token(s)", d.Subject, w)
		case seen[k]:
			return d.fieldErr("key_tokens", v, "listed twice")
		}
		seen[k] = true
	}
	return nil
}

func (d *Design) validateStream() error {
	s := d.Stream
	if s.Storage != "file" && s.Storage != "memory" {
		return d.fieldErr("stream.storage", s.Storage, "must be file or memory")
	}
	switch s.Retention {
	case "limits", "workqueue", "interest":
	default:
		return d.fieldErr("stream.retention", s.Retention, "must be limits, workqueue or interest")
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		return d.fieldErr("stream.replicas", fmt.Sprint(s.Replicas), "must be between 1 and 5")
	}
	switch {
	case s.MaxConsumers == 0 && !d.isSet("stream.max_consumers"):
	case s.MaxConsumers == -1 && d.Partitions <= serverMaxConsumers:
		// Unlimited, capped by the server default of 1000.
	case s.MaxConsumers < d.Partitions:
		return d.fieldErr("stream.max_consumers", fmt.Sprint(s.MaxConsumers), "below the %d lanes of this design (each lane is a consumer)", d.Partitions)
	}
	return nil
}

func (d *Design) validateLane() error {
	l := d.Lane
	positive := func(field string, v Duration) error {
		if d.isSet(field) && v <= 0 {
			return d.fieldErr(field, v.String(), "must be a positive duration")
		}
		return nil
	}
	if err := positive("lane.ack_wait", l.AckWait); err != nil {
		return err
	}
	if err := positive("lane.pinned_ttl", l.PinnedTTL); err != nil {
		return err
	}
	for i, b := range l.BackOff {
		if b <= 0 {
			return d.fieldErr("lane.backoff", b.String(), "step %d must be a positive duration", i+1)
		}
	}
	if l.MaxDeliver == 0 || l.MaxDeliver < -1 {
		return d.fieldErr("lane.max_deliver", fmt.Sprint(l.MaxDeliver), "must be -1 (unlimited) or at least 1")
	}
	if n := len(l.BackOff); n > 0 {
		if l.MaxDeliver != -1 && n > l.MaxDeliver {
			return d.fieldErr("lane.backoff", fmt.Sprint(n), "has more steps than lane.max_deliver (%d) allows deliveries", l.MaxDeliver)
		}
		if l.AckWait != l.BackOff[0] {
			return d.fieldErr("lane.ack_wait", l.AckWait.String(), "differs from lane.backoff[0] (%s): the server uses backoff[0] as the ack wait; make them equal or drop ack_wait", l.BackOff[0])
		}
	}
	if l.KeysInFlight < 1 || l.KeysInFlight > MaxKeysInFlight {
		return d.fieldErr("lane.keys_in_flight", fmt.Sprint(l.KeysInFlight), "must be between 1 (a serial lane) and %d", MaxKeysInFlight)
	}
	if l.MaxAckPending < 1 {
		return d.fieldErr("lane.max_ack_pending", fmt.Sprint(l.MaxAckPending), "must be at least 1 (1 keeps each lane strictly serial)")
	}
	if l.MaxWaiting < 1 {
		return d.fieldErr("lane.max_waiting", fmt.Sprint(l.MaxWaiting), "must be at least 1")
	}
	if d.isSet("lane.pinned_ttl") && !l.Pinned {
		return d.fieldErr("lane.pinned_ttl", l.PinnedTTL.String(), "is set but lane.pinned is false")
	}
	if l.Replicas < 0 || l.Replicas > 5 {
		return d.fieldErr("lane.replicas", fmt.Sprint(l.Replicas), "must be between 0 (same as the stream) and 5")
	}
	return nil
}

// warnings are valid choices that weaken the guarantee the tool is for.
func (d *Design) warnings() []string {
	var w []string
	if d.Lane.MaxAckPending > 1 && d.Lane.KeysInFlight <= 1 {
		w = append(w, fmt.Sprintf("lane.max_ack_pending is %d: a lane can have several messages out at once, so per-key order is not guaranteed; use 1", d.Lane.MaxAckPending))
	}
	if len(d.KeyTokens) > 1 {
		w = append(w, fmt.Sprintf("the key has %d tokens: the server hashes them concatenated with no separator, so keys like ab+c and a+bc always share a lane (harmless for order, but it can add skew)", len(d.KeyTokens)))
	}
	if d.Lane.Pinned && d.Lane.KeysInFlight <= 1 && d.Lane.AckWait < d.Lane.PinnedTTL {
		w = append(w, fmt.Sprintf("lane.ack_wait (%s) is shorter than lane.pinned_ttl (%s): when a pinned worker dies, its message waits for the pin to move, not for the ack wait", d.Lane.AckWait, d.Lane.PinnedTTL))
	}
	if lanes := d.laneCountWarning(MeasuredServerCPU); lanes != "" {
		w = append(w, lanes)
	}
	return w
}

// Fields lists the setting paths a design file may contain, for tools and docs.
func Fields() []string {
	f := []string{"name", "subject", "key_tokens", "partitions", "mapping", "prefix", "destination", "account",
		"stream.name", "stream.storage", "stream.replicas", "stream.retention", "stream.max_consumers",
		"lane.ack_wait", "lane.max_deliver", "lane.backoff", "lane.max_ack_pending", "lane.keys_in_flight", "lane.max_waiting",
		"lane.pinned", "lane.pinned_ttl", "lane.replicas"}
	sort.Strings(f)
	return f
}

// CheckStreamName says why s cannot name a stream, or returns nil: the
// server's rule, checked before any request.
func CheckStreamName(s string) error {
	switch {
	case !validName(s):
		return fmt.Errorf("not a valid stream name: no spaces, '.', '*', '>', '/' or '\\'")
	case len(s) > maxNameLen:
		return fmt.Errorf("not a valid stream name: longer than %d characters", maxNameLen)
	}
	return nil
}

// validName follows the server's rule for stream and consumer names.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n\f.*>/\\")
}

// validSubject follows the server's IsValidSubject, plus no control characters.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n\f") {
			return false
		}
		if t == ">" && i != len(toks)-1 {
			return false
		}
	}
	return true
}
