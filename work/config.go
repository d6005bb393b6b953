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
)

// Config is what a Worker needs besides its connection and handler.
type Config struct {
	Stream string // the design's stream
	Design string // the design name (lanes.design metadata of its lanes)
	// Instance names this instance in the membership; default
	// <hostname>-<6 random hex digits>.
	Instance string
	// Bucket is the KV bucket of the membership (default Bucket). Instances
	// see each other only in the same bucket: lanes simulate --live gives
	// each simulated worker group a bucket of its own, removed with its
	// sandbox, so that every group serves every lane, as the simulated
	// workers do, and nothing is left in lanes_work.
	Bucket string
	// Lease is the membership TTL (whole seconds, 2s or more), renewed every
	// third of it: an instance that stops renewing loses its lanes.
	Lease time.Duration
	// Grace is how long Run waits, once its context ends, for the messages
	// in flight to finish before it hands them back.
	Grace time.Duration
	// NoProgressAcks turns in-progress acks off. Only a simulation wants it
	// (lanes simulate --live without --in-progress shows what a worker
	// without them suffers): a handler that outlives its ack deadline then
	// runs beside the message's redelivery.
	NoProgressAcks bool
	// MaxProcessTime ends a handler that runs longer (0: no limit).
	MaxProcessTime time.Duration
	OnPoison       Policy
	DeadLetter     string // subject parked messages are published to
	ParkAfter      int    // attempts before a message is parked
	// Relist is how often the lanes are listed again (advisories also
	// trigger a listing at once).
	Relist time.Duration
	// Timeout bounds each request to the server.
	Timeout time.Duration
	// APIPrefix is the JetStream API prefix ($JS.API. or a domain's).
	APIPrefix  string
	PullExpiry time.Duration
	Logger     *slog.Logger
	Metrics    *Metrics // nil: no Prometheus metrics
}

// bucketName: what a KV bucket may be called.
var bucketName = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,200}$`)

// instanceName: KV keys allow [-/_=.a-zA-Z0-9]; lanes keeps to [-_a-zA-Z0-9].
var instanceName = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,64}$`)

// ConfigError is a bad setting. Field is named like the lanes work flag
// that sets it.
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
		return bad("stream", c.Stream+"/"+c.Design, "a stream and a design name are required")
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if !instanceName.MatchString(c.Instance) {
		return bad("instance", c.Instance, "use 1 to 64 letters, digits, '-' or '_'")
	}
	if c.Bucket == "" {
		c.Bucket = Bucket
	}
	if !bucketName.MatchString(c.Bucket) {
		return bad("bucket", c.Bucket, "use letters, digits, '-' or '_'")
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < minLease || c.Lease%time.Second != 0 {
		return bad("lease", c.Lease, "must be whole seconds, at least %s (the server's key TTLs are in seconds)", minLease)
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Grace < 0 {
		return bad("grace", c.Grace, "cannot be negative")
	}
	if c.MaxProcessTime < 0 {
		return bad("max-process-time", c.MaxProcessTime, "cannot be negative")
	}
	switch c.OnPoison {
	case "":
		c.OnPoison = Block
	case Block:
	case Park:
		if c.DeadLetter == "" {
			return bad("on-poison", c.OnPoison, "park needs a dead-letter subject: where parked messages go")
		}
	default:
		return bad("on-poison", c.OnPoison, "choose block or park")
	}
	if d := c.DeadLetter; d != "" && (strings.ContainsAny(d, "*> \t\r\n") || strings.Contains(d, "..") ||
		strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".")) {
		return bad("dead-letter", d, "must be a literal subject (no wildcards or spaces)")
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	if c.ParkAfter < 1 {
		return bad("park-after", c.ParkAfter, "must be at least 1")
	}
	if c.Relist == 0 {
		c.Relist = DefaultRelist
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.APIPrefix == "" {
		c.APIPrefix = "$JS.API."
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
