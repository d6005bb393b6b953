// Package connect opens a NATS connection the way every NATS tool does
// (flags, environment, natscli contexts) and turns connection failures into
// one plain sentence each. No secret ever appears in an error it returns.
package connect

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultServer is where NATS tools look when nothing else is said.
const DefaultServer = "nats://127.0.0.1:4222"

// DefaultTimeout bounds every request; nothing waits forever.
const DefaultTimeout = 5 * time.Second

// Options are the connection settings, from flags over a natscli context.
type Options struct {
	Server   string
	Context  string // natscli context name
	Creds    string // path to a .creds file
	NKey     string // path to an nkey seed file
	User     string
	Password string
	Token    string
	TLSCert  string
	TLSKey   string
	TLSCA    string
	TLSFirst bool
	JSDomain string
	Timeout  time.Duration
	Name     string // client name shown by the server

	// Set by a natscli context only.
	UserJWT     string // user_jwt: with user_seed or nkey, or a bearer JWT alone
	UserSeed    string // user_seed
	InboxPrefix string // inbox_prefix
	APIPrefix   string // jetstream_api_prefix (instead of a domain)

	// ConfigHome is where natscli keeps contexts ($XDG_CONFIG_HOME or ~/.config).
	ConfigHome string

	from map[string]string // where each setting came from, for errors
}

// Named reports whether a server or a context was named (flags or
// environment), natscli's selected context aside.
func (o Options) Named() bool { return o.Server != "" || o.Context != "" }

// Given reports whether there is a server to go to: one named, or the
// context natscli has selected (context.txt). Every command that connects
// when it can resolves it this way.
func (o Options) Given() bool { return o.Named() || selectedContext(o.ConfigHome) != "" }

// Kind classifies a failure so commands can map it to an exit code.
type Kind int

const (
	KindOther  Kind = iota
	KindConfig      // a flag or context setting is wrong: nothing was tried
	KindConnect
	KindAuth
	KindPermission
	KindNoJetStream
	KindTimeout
	KindUnavailable // JetStream answered that it cannot serve: no leader
)

// Error is a connection failure described in one sentence, secrets removed.
type Error struct {
	Kind Kind
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func configError(format string, args ...any) *Error {
	return &Error{Kind: KindConfig, Msg: fmt.Sprintf(format, args...)}
}

// Conn is a connection with a JetStream handle and a request deadline.
type Conn struct {
	NC      *nats.Conn
	JS      jetstream.JetStream
	Timeout time.Duration
	Server  string // redacted URL, safe to print
	// APIPrefix is where JetStream API requests go: "$JS.API." or "$JS.<domain>.API.".
	APIPrefix string

	domain   string
	mu       sync.Mutex
	watchers map[int]context.CancelCauseFunc
	nextID   int
}

// Around is a Conn on a connection its caller made and holds (a Go program
// using lanes' packages): js gives the connection and where JetStream API
// requests go. Nothing watches it for permission violations (its owner's
// error handler receives them), and Close is its owner's.
func Around(js jetstream.JetStream, timeout time.Duration) *Conn {
	nc := js.Conn()
	return &Conn{NC: nc, JS: js, Timeout: timeout, APIPrefix: APIPrefixOf(js), Server: Redact(nc.ConnectedUrlRedacted()),
		domain: js.Options().Domain, watchers: map[int]context.CancelCauseFunc{}}
}

// APIPrefixOf is where js sends JetStream API requests: $JS.API., a
// domain's $JS.<domain>.API., or the prefix js was made with.
func APIPrefixOf(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// Open resolves the options (context file, defaults), connects, and checks
// that JetStream answers.
func Open(ctx context.Context, o Options) (*Conn, error) {
	c, err := Dial(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := c.CheckJetStream(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Dial resolves the options and connects, without asking JetStream
// anything: for a watch that keeps going while JetStream is unavailable.
func Dial(ctx context.Context, o Options) (*Conn, error) {
	o, err := resolve(o)
	if err != nil {
		return nil, err
	}
	c := &Conn{Timeout: o.Timeout, Server: Redact(o.Server), APIPrefix: jetstream.DefaultAPIPrefix, domain: o.JSDomain, watchers: map[int]context.CancelCauseFunc{}}
	switch {
	case o.JSDomain != "" && o.APIPrefix != "":
		return nil, configError("%s and %s are both set: a JetStream domain and an API prefix say the same thing twice; give one", o.where("jetstream_domain"), o.where("jetstream_api_prefix"))
	case o.JSDomain != "":
		if !validPrefix(o.JSDomain) || strings.Contains(o.JSDomain, ".") {
			return nil, configError("%s %q: not a JetStream domain name", o.where("jetstream_domain"), o.JSDomain)
		}
		c.APIPrefix = "$JS." + o.JSDomain + ".API."
	case o.APIPrefix != "":
		p := strings.TrimSuffix(o.APIPrefix, ".")
		if !validPrefix(p) {
			return nil, configError("%s %q: not a subject prefix", o.where("jetstream_api_prefix"), o.APIPrefix)
		}
		c.APIPrefix = p + "."
	}
	opts, err := natsOptions(o, c)
	if err != nil {
		return nil, err
	}
	nc, err := dial(ctx, o.Server, opts)
	if err != nil {
		return nil, err
	}
	c.NC = nc
	if o.JSDomain != "" {
		c.JS, err = jetstream.NewWithDomain(nc, o.JSDomain)
	} else {
		c.JS, err = jetstream.NewWithAPIPrefix(nc, c.APIPrefix)
	}
	if err != nil {
		nc.Close()
		return nil, &Error{Kind: KindOther, Msg: "cannot use JetStream: " + err.Error(), Err: err}
	}
	return c, nil
}

// dial connects, giving up as soon as ctx ends: nats.Connect takes no
// context, and a server that accepts TCP but never answers would otherwise
// hold a Ctrl-C until the connect timeout of every URL has passed.
func dial(ctx context.Context, servers string, opts []nats.Option) (*nats.Conn, error) {
	type dialed struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		nc, err := nats.Connect(servers, opts...)
		ch <- dialed{nc, err}
	}()
	select {
	case d := <-ch:
		if d.err != nil {
			return nil, classifyConnect(d.err, Redact(servers))
		}
		return d.nc, nil
	case <-ctx.Done():
		go func() { // close it if it connects after all
			if d := <-ch; d.nc != nil {
				d.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to %s: %w", Redact(servers), ctx.Err())
	}
}

// Close closes the connection at once, draining nothing: a request needs
// no drain, and whoever subscribes or publishes on the connection ends
// that first (lanes work drains its pulls, simulate's live run waits for
// its publish acks).
func (c *Conn) Close() {
	if c != nil && c.NC != nil {
		c.NC.Close()
	}
}

// CheckJetStream asks JetStream for the account's information: an answer
// means JetStream is enabled and reachable.
func (c *Conn) CheckJetStream(ctx context.Context) error {
	domain := c.domain
	ctx, cancel := c.Guard(ctx)
	defer cancel()
	ctx, cancelTimeout := c.Ctx(ctx) // --timeout, not the jetstream package's default
	defer cancelTimeout()
	_, err := c.JS.AccountInfo(ctx)
	if err == nil {
		return nil
	}
	if e := c.Classify(ctx, err); e.Kind != KindOther && e.Kind != KindTimeout {
		return e
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		where := "this account"
		if domain != "" {
			where = fmt.Sprintf("this account in JetStream domain %q", domain)
		}
		return &Error{Kind: KindNoJetStream, Err: err, Msg: fmt.Sprintf(
			"JetStream is not enabled for %s on %s: start nats-server with -js (or jetstream {} in its config) and check the account's JetStream limits and --js-domain", where, c.Server)}
	}
	return c.Classify(ctx, err)
}

// Diagnose looks for the reason behind a request that timed out: when
// JetStream itself says it cannot answer (a cluster without a leader), that
// is the error to show. Anything else is returned as it was.
func (c *Conn) Diagnose(ctx context.Context, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindTimeout || ctx.Err() != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, min(c.Timeout, time.Second))
	defer cancel()
	_, aerr := c.JS.AccountInfo(dctx)
	if u := unavailable(c.Server, aerr); u != nil {
		return u
	}
	if errors.Is(aerr, context.DeadlineExceeded) && ctx.Err() == nil {
		return &Error{Kind: KindTimeout, Err: err, Msg: fmt.Sprintf(
			"no answer from %s within %s, not even to an account request: JetStream may have lost its leader (most of a cluster's nodes down or cut off) or be overloaded; check with nats server report jetstream", c.Server, c.Timeout)}
	}
	return err
}

// Ctx returns a context with the request deadline.
func (c *Conn) Ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.Timeout)
}

// Guard returns a context that is cancelled as soon as the server reports a
// permissions violation, so a forbidden request fails at once instead of
// waiting for its deadline.
func (c *Conn) Guard(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	c.mu.Lock()
	if c.watchers == nil { // a Conn made around an existing connection
		c.watchers = map[int]context.CancelCauseFunc{}
	}
	id := c.nextID
	c.nextID++
	c.watchers[id] = cancel
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.watchers, id)
		c.mu.Unlock()
		cancel(nil)
	}
}

func (c *Conn) permissionDenied(err error) {
	e := &Error{Kind: KindPermission, Err: err, Msg: fmt.Sprintf(
		"permission denied on %s: %s; the user needs publish permission on $JS.API.> (or the subjects named) and subscribe permission on _INBOX.>", c.Server, permissionDetail(err))}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.watchers {
		cancel(e)
	}
}

func permissionDetail(err error) string {
	msg := err.Error()
	if i := strings.Index(strings.ToLower(msg), "permissions violation"); i >= 0 {
		return strings.Trim(msg[i:], "' ")
	}
	return msg
}

// Classify turns an error from a request made under ctx into an *Error.
func (c *Conn) Classify(ctx context.Context, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if cause := context.Cause(ctx); cause != nil && errors.As(cause, &e) {
		return e
	}
	if u := unavailable(c.Server, err); u != nil {
		return u
	}
	switch {
	case errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation"):
		return &Error{Kind: KindPermission, Err: err, Msg: fmt.Sprintf("permission denied on %s: %s", c.Server, permissionDetail(err))}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return &Error{Kind: KindTimeout, Err: err, Msg: fmt.Sprintf(
			"no answer from %s within %s: check that JetStream is healthy (in a cluster, that the stream and consumer leaders are up) or raise --timeout", c.Server, c.Timeout)}
	case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected):
		return &Error{Kind: KindConnect, Err: err, Msg: fmt.Sprintf("lost the connection to %s: check the server and the network", c.Server)}
	}
	return &Error{Kind: KindOther, Err: err, Msg: err.Error()}
}

// unavailable is NoLeader for an answer of the jetstream package (its KV
// buckets, the account check) that says the cluster has no meta leader,
// and nil for any other error: other 503s, such as JetStream not
// enabled, say their own thing. (jsapi recognises its own answers.)
func unavailable(server string, err error) *Error {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != jetstream.ErrorCode(nats.JSErrCodeJetStreamNotAvailable) {
		return nil
	}
	return NoLeader(server, err)
}

// NoLeader says in words that JetStream answered that it cannot serve
// (503, no meta leader: most of a cluster's nodes are down or cut off),
// keeping the answer.
func NoLeader(server string, answer error) *Error {
	return &Error{Kind: KindUnavailable, Err: answer, Msg: fmt.Sprintf(
		"JetStream on %s cannot answer: the cluster has no leader (most of its nodes are down or cut off from each other); check the cluster with nats server report jetstream", server)}
}

func classifyConnect(err error, server string) error {
	low := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(low, "authorization violation") || strings.Contains(low, "authentication"):
		return &Error{Kind: KindAuth, Err: err, Msg: fmt.Sprintf(
			"authentication failed on %s: check the user and password, token, nkey or credentials (and the --context in use)", server)}
	case strings.Contains(low, "tls") || strings.Contains(low, "x509") || strings.Contains(low, "certificate"):
		return &Error{Kind: KindConnect, Err: err, Msg: fmt.Sprintf(
			"TLS handshake with %s failed (%s): check --tlsca, --tlscert, --tlskey and --tlsfirst", server, tlsDetail(err))}
	default:
		return &Error{Kind: KindConnect, Err: err, Msg: fmt.Sprintf(
			"cannot connect to %s: check the address (--server, NATS_URL or --context) and that nats-server is running and reachable", server)}
	}
}

// tlsDetail keeps the certificate problem, which names no secret.
func tlsDetail(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "x509:"); i >= 0 {
		return msg[i:]
	}
	if i := strings.Index(msg, "tls:"); i >= 0 {
		return msg[i:]
	}
	return "handshake error"
}

// Redact removes user info from each URL in a comma-separated server list.
func Redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, s := range parts {
		s = strings.TrimSpace(s)
		if u, err := url.Parse(s); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
			continue
		}
		if at := strings.LastIndex(s, "@"); at >= 0 {
			scheme := ""
			if j := strings.Index(s, "://"); j >= 0 && j < at {
				scheme = s[:j+3]
			}
			s = scheme + s[at+1:]
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

func natsOptions(o Options, c *Conn) ([]nats.Option, error) {
	name := o.Name
	if name == "" {
		name = "lanes"
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(o.Timeout),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				c.permissionDenied(err)
			}
		}),
	}
	auth, err := authOptions(o)
	if err != nil {
		return nil, err
	}
	secure, err := tlsOptions(o)
	if err != nil {
		return nil, err
	}
	opts = append(append(opts, auth...), secure...)
	return opts, nil
}
