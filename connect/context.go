package connect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// natsContext is the part of a natscli context file lanes uses.
type natsContext struct {
	URL      string `json:"url"`
	Token    string `json:"token"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
	JSDomain string `json:"jetstream_domain"`
	TLSFirst bool   `json:"tls_first"`
}

// resolve fills options from the selected natscli context (flags win) and
// applies defaults.
func resolve(o Options) (Options, error) {
	name := o.Context
	if name == "" && o.Server == "" {
		name = selectedContext(o.ConfigHome)
	}
	if name != "" {
		ctx, err := loadContext(o.ConfigHome, name)
		if err != nil {
			return o, err
		}
		o = overlay(o, ctx)
	}
	if o.Server == "" {
		o.Server = DefaultServer
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

// overlay fills empty options from the context: flags override the context.
func overlay(o Options, c natsContext) Options {
	fill := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	fill(&o.Server, c.URL)
	fill(&o.Token, c.Token)
	fill(&o.User, c.User)
	fill(&o.Password, c.Password)
	fill(&o.Creds, expandHome(c.Creds))
	fill(&o.NKey, expandHome(c.NKey))
	fill(&o.TLSCert, expandHome(c.Cert))
	fill(&o.TLSKey, expandHome(c.Key))
	fill(&o.TLSCA, expandHome(c.CA))
	fill(&o.JSDomain, c.JSDomain)
	o.TLSFirst = o.TLSFirst || c.TLSFirst
	return o
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
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return c, &Error{Kind: KindConnect, Msg: fmt.Sprintf("context name %q is not valid: it must not contain path separators", name)}
	}
	path := filepath.Join(contextDir(configHome), "context", name+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, &Error{Kind: KindConnect, Err: err, Msg: fmt.Sprintf("NATS context %q not found (looked for %s): list contexts with 'nats context ls'", name, path)}
	}
	if err != nil {
		return c, &Error{Kind: KindConnect, Err: err, Msg: fmt.Sprintf("cannot read NATS context %q: %v", name, err)}
	}
	if err := json.Unmarshal(b, &c); err != nil {
		// The JSON error never quotes the file's content, so no secret leaks.
		return c, &Error{Kind: KindConnect, Msg: fmt.Sprintf("NATS context file %s is not valid JSON", path)}
	}
	return c, nil
}

func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	return p
}
