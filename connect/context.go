package connect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
)

// natsContext is a natscli context file: every field natscli writes.
type natsContext struct {
	Description string `json:"description"`
	URL         string `json:"url"`
	Token       string `json:"token"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	UserJWT     string `json:"user_jwt"`
	UserSeed    string `json:"user_seed"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	NSC         string `json:"nsc"`
	JSDomain    string `json:"jetstream_domain"`
	JSAPIPrefix string `json:"jetstream_api_prefix"`
	// The event prefix only matters to tools that read advisories; lanes
	// reads none, so it changes nothing here.
	JSEventPrefix string `json:"jetstream_event_prefix"`
	InboxPrefix   string `json:"inbox_prefix"`
	ColorScheme   string `json:"color_scheme"`
	TLSFirst      bool   `json:"tls_first"`
}

// unsupportedFields are natscli context fields lanes cannot honour: a
// context that sets one is refused, rather than connecting without it.
var unsupportedFields = map[string]string{
	"socks_proxy":            "lanes cannot connect through a SOCKS proxy",
	"windows_cert_store":     "lanes cannot read the Windows certificate store; use cert and key files",
	"windows_cert_match_by":  "lanes cannot read the Windows certificate store; use cert and key files",
	"windows_cert_match":     "lanes cannot read the Windows certificate store; use cert and key files",
	"windows_ca_certs_match": "lanes cannot read the Windows certificate store; use a ca file",
}

// resolve fills options from the natscli context (flags win), records
// where each setting came from, and applies defaults. The context is the
// one named (--context, NATS_CONTEXT), or natscli's selected one
// (context.txt) when no server is named either.
func resolve(o Options) (Options, error) {
	o.from = map[string]string{}
	for field, flag := range flagNames {
		if *o.field(field) != "" {
			o.from[field] = flag
		}
	}
	name := o.Context
	if name == "" && o.Server == "" {
		name = selectedContext(o.ConfigHome)
	}
	if name != "" {
		c, err := loadContext(o.ConfigHome, name)
		if err != nil {
			return o, err
		}
		if o, err = overlay(o, name, c); err != nil {
			return o, err
		}
	}
	if o.Server == "" {
		o.Server = DefaultServer
	}
	switch {
	case o.Timeout < 0:
		return o, configError("--timeout %s: must be a positive duration", o.Timeout)
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

// flagNames maps the settings a context can also give to their flags.
var flagNames = map[string]string{
	"url": "--server", "token": "--token", "user": "--user", "password": "--password", "creds": "--creds",
	"nkey": "--nkey", "cert": "--tlscert", "key": "--tlskey", "ca": "--tlsca", "jetstream_domain": "--js-domain",
}

func (o *Options) field(name string) *string {
	switch name {
	case "url":
		return &o.Server
	case "token":
		return &o.Token
	case "user":
		return &o.User
	case "password":
		return &o.Password
	case "creds":
		return &o.Creds
	case "nkey":
		return &o.NKey
	case "user_jwt":
		return &o.UserJWT
	case "user_seed":
		return &o.UserSeed
	case "cert":
		return &o.TLSCert
	case "key":
		return &o.TLSKey
	case "ca":
		return &o.TLSCA
	case "jetstream_domain":
		return &o.JSDomain
	case "jetstream_api_prefix":
		return &o.APIPrefix
	case "inbox_prefix":
		return &o.InboxPrefix
	}
	panic("connect: unknown setting " + name)
}

// where names the flag or context field a setting came from, for errors.
func (o Options) where(field string) string {
	if w := o.from[field]; w != "" {
		return w
	}
	if f := flagNames[field]; f != "" {
		return f
	}
	return field
}

// overlay fills empty options from the context: flags override it. A
// password or token set on the command line keeps the context's user.
func overlay(o Options, name string, c natsContext) (Options, error) {
	if c.NSC != "" {
		creds, servers, err := resolveNSC(name, c.NSC)
		if err != nil {
			return o, err
		}
		if c.Creds == "" {
			c.Creds = creds
		}
		if c.URL == "" {
			c.URL = servers
		}
	}
	fields := map[string]string{
		"url": c.URL, "token": c.Token, "user": c.User, "password": c.Password, "creds": expandHome(c.Creds),
		"nkey": expandHome(c.NKey), "user_jwt": c.UserJWT, "user_seed": c.UserSeed, "cert": expandHome(c.Cert),
		"key": expandHome(c.Key), "ca": expandHome(c.CA), "jetstream_domain": c.JSDomain,
		"jetstream_api_prefix": c.JSAPIPrefix, "inbox_prefix": c.InboxPrefix,
	}
	for field, v := range fields {
		if dst := o.field(field); *dst == "" && v != "" {
			*dst = v
			o.from[field] = fmt.Sprintf("context %q field %q", name, field)
		}
	}
	o.TLSFirst = o.TLSFirst || c.TLSFirst
	return o, nil
}

func contextDir(configHome string) string {
	if configHome == "" {
		if home, err := os.UserHomeDir(); err == nil {
			configHome = filepath.Join(home, ".config")
		}
	}
	return filepath.Join(configHome, "nats")
}

// selectedContext is the context natscli would use: the one in context.txt.
func selectedContext(configHome string) string {
	b, err := os.ReadFile(filepath.Join(contextDir(configHome), "context.txt"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func loadContext(configHome, name string) (natsContext, error) {
	var c natsContext
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.Contains(name, "..") {
		return c, configError("context name %q is not valid: it must not contain path separators or '..'", name)
	}
	path := filepath.Join(contextDir(configHome), "context", name+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, configError("NATS context %q not found (looked for %s): list contexts with 'nats context ls'", name, path)
	}
	if err != nil {
		return c, configError("cannot read NATS context %q: %v", name, err)
	}
	// The JSON errors never quote the file's content, so no secret leaks.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return c, configError("NATS context file %s is not valid JSON", path)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return c, configError("NATS context %q field %q has the wrong type (want %s)", name, te.Field, te.Type)
		}
		return c, configError("NATS context file %s is not valid JSON", path)
	}
	for field, why := range unsupportedFields {
		if raw, ok := fields[field]; ok && isSet(raw) {
			return c, configError("NATS context %q field %q is set: %s", name, field, why)
		}
	}
	return c, nil
}

// isSet: natscli writes every field, empty ones as "" or [].
func isSet(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != `""` && s != "null" && s != "[]" && s != "false" && s != ""
}

// resolveNSC finds the credentials (and server URLs) that natscli would get
// from "nsc generate profile nsc://operator/account/user": nsc keeps them in
// its key store, creds/<operator>/<account>/<user>.creds, and the
// operator's service URLs in its JWT. lanes reads them without running nsc.
func resolveNSC(context, ref string) (creds, servers string, err error) {
	fail := func(format string, args ...any) error {
		return configError("NATS context %q field \"nsc\" (%s): %s", context, ref, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(ref)
	if err != nil || u.Scheme != "nsc" {
		return "", "", fail("not an nsc://operator/account/user address")
	}
	operator := u.Host
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if operator == "" || len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", fail("lanes needs a user: nsc://operator/account/user")
	}
	account, user := parts[0], parts[1]
	q := u.Query()
	keys := q.Get("keystore")
	if keys == "" {
		keys = os.Getenv("NKEYS_PATH")
	}
	if keys == "" {
		keys = filepath.Join(dataHome(), "nats", "nsc", "keys")
	}
	creds = filepath.Join(expandHome(keys), "creds", operator, account, user+".creds")
	if _, err := os.Stat(creds); err != nil {
		return "", "", fail("no credentials at %s (create them with nsc generate creds, or set the context's \"creds\")", creds)
	}
	store := q.Get("store")
	if store == "" {
		store = filepath.Join(dataHome(), "nats", "nsc", "stores")
	}
	if b, err := os.ReadFile(filepath.Join(expandHome(store), operator, operator+".jwt")); err == nil {
		if oc, err := jwt.DecodeOperatorClaims(strings.TrimSpace(string(b))); err == nil {
			servers = strings.Join(oc.OperatorServiceURLs, ",")
		}
	}
	return creds, servers, nil
}

func dataHome() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share")
}

func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return p
}
