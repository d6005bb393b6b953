package work

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/membership"
	"github.com/lanes-dev/lanes/planner"
)

// Defaults. DefaultLease bounds failover: an instance that stops renewing
// its membership loses its lanes about one lease later.
const (
	DefaultLease      = 5 * time.Second
	DefaultGrace      = 20 * time.Second
	DefaultParkAfter  = 5
	DefaultRelist     = 10 * time.Second
	DefaultTimeout    = 5 * time.Second
	DefaultPullExpiry = 30 * time.Second
	minLease          = 2 * time.Second
)

// Policy is what happens to a message that keeps failing.
type Policy string

const (
	// Block keeps retrying: strict order, the lane waits behind its head.
	Block Policy = "block"
	// Park republishes the message to a dead-letter subject after
	// ParkAfter attempts, then acknowledges it: the key moves on.
	Park Policy = "park"
	// Quarantine parks the failing message after ParkAfter attempts and
	// records its key as quarantined in the membership bucket: every later
	// message of the key is parked unrun, in order, by every instance,
	// until lanes parked replay --key lifts it; other keys go on.
	Quarantine Policy = "quarantine"
)

// Config is what a Worker needs besides its JetStream context and its
// handler. Only Stream and Design are required; everything else has a
// default.
type Config struct {
	Stream string // the design's stream
	Design string // the design name (the lanes.design metadata of its lanes)
	// Instance names this instance in the membership: one live instance
	// per name. Default: <hostname>-<6 random hex digits>.
	Instance string
	// Lease is the membership TTL (whole seconds, 2s or more), renewed every
	// third of it: an instance that stops renewing loses its lanes about a
	// lease later. Default DefaultLease.
	Lease time.Duration
	// Grace is how long Run waits, once its context ends, for the messages
	// in flight to finish before it hands them back. Default DefaultGrace.
	Grace time.Duration
	// MaxProcessTime ends a handler that runs longer, and retries its
	// message (0: no limit).
	MaxProcessTime time.Duration
	// OnPoison is what happens to a message that keeps failing: Block
	// (the default), Park or Quarantine.
	OnPoison Policy
	// DeadLetter is the subject parked messages are published to; a stream
	// other than Stream must store it. A message the handler terminates
	// (Term) is parked there too when it is set.
	DeadLetter string
	// ParkAfter is how many attempts a message gets before it is parked
	// (Park, Quarantine). Default DefaultParkAfter.
	ParkAfter int
	// Logger receives what the worker does (joins, hand-overs, failures);
	// nil: nothing is logged.
	Logger *slog.Logger
	// Metrics, from NewMetrics, collects Prometheus series; nil: none.
	Metrics *Metrics

	// Tuning, rarely needed.

	// Timeout bounds each request to the server. Default DefaultTimeout.
	Timeout time.Duration
	// Relist is how often the stream's consumer count is checked, and a
	// listing of the lanes runs when it changed; a full listing runs every
	// Relist, or every 30 ms per consumer of the stream when that is
	// longer. Advisories and apply's lock also trigger a listing at once.
	// Default DefaultRelist.
	Relist time.Duration
	// PullExpiry is how long an idle lane's pull request waits at the
	// server before it is renewed; an instance serving more than 640
	// lanes stretches it (see docs/work.md). Default DefaultPullExpiry.
	PullExpiry time.Duration
	// Bucket is the KV bucket of the membership (default
	// membership.Bucket). Instances see each other only in the same
	// bucket: a live simulation gives each simulated worker group a bucket
	// of its own, so that every group serves every lane.
	Bucket string

	// For simulations only.

	// NoProgressAcks turns in-progress acks off, to show what a worker
	// without them suffers: a handler that outlives its ack deadline then
	// runs beside the message's redelivery. Never set it to process
	// messages.
	NoProgressAcks bool

	// noFence (tests only) lets a key-parallel session run without waiting
	// to be in sync: the test that shows the fence matters.
	noFence bool
}

// bucketName: what a KV bucket may be called.
var bucketName = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,200}$`)

// instanceName: KV keys allow [-/_=.a-zA-Z0-9]; lanes keeps to [-_a-zA-Z0-9].
var instanceName = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,64}$`)

// ConfigError is a bad setting: Field names the Config field.
type ConfigError struct {
	Field string
	Value string // as given, escaped and cut after 64 bytes (saying how long it was)
	Msg   string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Msg) }

// Validate reports the first bad setting.
func (c Config) Validate() error { return c.normalize() }

func (c *Config) normalize() error {
	bad := func(field string, value any, format string, args ...any) error {
		return &ConfigError{Field: field, Value: planner.Printable(fmt.Sprint(value), 64), Msg: fmt.Sprintf(format, args...)}
	}
	if c.Stream == "" || c.Design == "" {
		return bad("Stream", c.Stream+"/"+c.Design, "a stream and a design name are required")
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if !instanceName.MatchString(c.Instance) {
		return bad("Instance", c.Instance, "use 1 to 64 letters, digits, '-' or '_'")
	}
	if c.Bucket == "" {
		c.Bucket = membership.Bucket
	}
	if !bucketName.MatchString(c.Bucket) {
		return bad("Bucket", c.Bucket, "use letters, digits, '-' or '_'")
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < minLease || c.Lease%time.Second != 0 {
		return bad("Lease", c.Lease, "must be whole seconds, at least %s (the server's key TTLs are in seconds)", minLease)
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Grace < 0 {
		return bad("Grace", c.Grace, "cannot be negative")
	}
	if c.MaxProcessTime < 0 {
		return bad("MaxProcessTime", c.MaxProcessTime, "cannot be negative")
	}
	switch c.OnPoison {
	case "":
		c.OnPoison = Block
	case Block:
	case Park:
		if c.DeadLetter == "" {
			return bad("OnPoison", c.OnPoison, "park needs a dead-letter subject: where parked messages go")
		}
	case Quarantine:
		if c.DeadLetter == "" {
			return bad("OnPoison", c.OnPoison, "quarantine needs a dead-letter subject: where a quarantined key's messages are parked")
		}
	default:
		return bad("OnPoison", c.OnPoison, "choose block, park or quarantine")
	}
	if d := c.DeadLetter; d != "" && (strings.ContainsAny(d, "*> \t\r\n") || strings.Contains(d, "..") ||
		strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".")) {
		return bad("DeadLetter", d, "must be a literal subject (no wildcards or spaces)")
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	if c.ParkAfter < 1 {
		return bad("ParkAfter", c.ParkAfter, "must be at least 1")
	}
	if c.Relist == 0 {
		c.Relist = DefaultRelist
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PullExpiry == 0 {
		c.PullExpiry = DefaultPullExpiry
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DefaultInstance is the host name (cleaned for a KV key) and a random
// suffix, so that two instances on one host, or a restart before the old
// lease expired, never share a name.
func DefaultInstance() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '-'
	}, host)
	if len(host) > 50 {
		host = host[:50]
	}
	if host == "" {
		host = "worker"
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}
