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
	// Lease is the membership TTL (whole seconds, 2s or more), renewed every
	// third of it: an instance that stops renewing loses its lanes.
	Lease time.Duration
	// Grace is how long Run waits, once its context ends, for the messages
	// in flight to finish before it hands them back.
	Grace time.Duration
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

// instanceName: KV keys allow [-/_=.a-zA-Z0-9]; lanes keeps to [-_a-zA-Z0-9].
var instanceName = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,64}$`)

func (c *Config) normalize() error {
	if c.Stream == "" || c.Design == "" {
		return fmt.Errorf("a stream and a design name are required")
	}
	if c.Instance == "" {
		c.Instance = DefaultInstance()
	}
	if !instanceName.MatchString(c.Instance) {
		return fmt.Errorf("instance name %q: use 1 to 64 letters, digits, '-' or '_'", c.Instance)
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.Lease < minLease || c.Lease%time.Second != 0 {
		return fmt.Errorf("lease %s: must be whole seconds, at least %s (the server's TTLs are in seconds)", c.Lease, minLease)
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.MaxProcessTime < 0 || c.Grace < 0 {
		return fmt.Errorf("durations cannot be negative")
	}
	switch c.OnPoison {
	case "":
		c.OnPoison = Block
	case Block:
	case Park:
		if c.DeadLetter == "" {
			return fmt.Errorf("on-poison park needs a dead-letter subject")
		}
	default:
		return fmt.Errorf("on-poison %q: choose block or park", c.OnPoison)
	}
	if c.DeadLetter != "" && (strings.ContainsAny(c.DeadLetter, "*> \t\r\n") || strings.Contains(c.DeadLetter, "..") ||
		strings.HasPrefix(c.DeadLetter, ".") || strings.HasSuffix(c.DeadLetter, ".")) {
		return fmt.Errorf("dead-letter subject %q: must be a literal subject (no wildcards or spaces)", c.DeadLetter)
	}
	if c.ParkAfter == 0 {
		c.ParkAfter = DefaultParkAfter
	}
	if c.ParkAfter < 1 {
		return fmt.Errorf("park-after %d: must be at least 1", c.ParkAfter)
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
