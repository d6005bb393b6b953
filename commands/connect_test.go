package commands_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
)

// lanes runs the CLI in-process as a user types it and returns the exit
// code and both outputs. The environment is cleared of NATS settings and
// natscli contexts unless the test sets them.
func lanes(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = commands.Main(append([]string{"lanes"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func cleanEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"LANES_FILE", "NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CERT", "NATS_KEY", "NATS_CA"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
}

// seed is the example design the tests apply.
var seed = []string{"-f", "../examples/seed/lanes.yaml"}

func applyArgs(extra ...string) []string {
	return append(append([]string{"apply", "--yes"}, seed...), extra...)
}

// noSecrets fails if any secret appears in any output.
func noSecrets(t *testing.T, outputs []string, secrets ...string) {
	t.Helper()
	for _, o := range outputs {
		for _, s := range secrets {
			if s != "" && strings.Contains(o, s) {
				t.Fatalf("secret %.12q... appears in output:\n%s", s, o)
			}
		}
	}
}

func expect(t *testing.T, code int, stdout, stderr string, wantCode int, wantErr string) {
	t.Helper()
	t.Logf("exit %d, stderr: %s", code, stderr)
	if code != wantCode || !strings.Contains(stderr, wantErr) {
		t.Fatalf("exit %d (want %d), stderr %q (want it to mention %q)\nstdout:\n%s", code, wantCode, stderr, wantErr, stdout)
	}
}

func TestConnectUserPassword(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t, natstest.WithUsers(natstest.User{Name: "alice", Password: "hunter2-correct"}))
	var outs []string
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--user", "alice", "--password", "wrong-pass-0xDEAD")...)
	outs = append(outs, out, errs)
	expect(t, code, out, errs, commands.ExitAuth, "authentication failed")

	url := strings.Replace(srv.URL(), "nats://", "nats://alice:wrong-url-pass-0xBEEF@", 1)
	code, out, errs = lanes(t, applyArgs("--server", url)...)
	outs = append(outs, out, errs)
	expect(t, code, out, errs, commands.ExitAuth, "authentication failed")

	t.Setenv("NATS_PASSWORD", "hunter2-correct")
	code, out, errs = lanes(t, applyArgs("--server", srv.URL(), "--user", "alice", "-o", "json")...)
	outs = append(outs, out, errs)
	expect(t, code, out, errs, 0, "")
	noSecrets(t, outs, "wrong-pass-0xDEAD", "wrong-url-pass-0xBEEF", "hunter2-correct")
}

func TestConnectMissingPermission(t *testing.T) {
	cleanEnv(t)
	reader := natstest.ReadOnlyJetStream
	reader.Name, reader.Password = "reader", "reader-pw-secret"
	admin := natstest.User{Name: "admin", Password: "admin-pw-secret"}
	srv := natstest.Start(t, natstest.WithUsers(reader, admin))

	start := time.Now()
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--user", "reader", "--password", "reader-pw-secret")...)
	expect(t, code, out, errs, commands.ExitPermission, "permission denied")
	if !strings.Contains(errs, "STREAM.CREATE") {
		t.Fatalf("the message should name the forbidden subject: %s", errs)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("a permission violation took %s: it must fail fast, not wait for the deadline", took)
	}
	// A dry run only reads: allowed.
	code, out, errs = lanes(t, append([]string{"apply", "--dry-run", "--server", srv.URL(), "--user", "reader", "--password", "reader-pw-secret"}, seed...)...)
	expect(t, code, out, errs, commands.ExitChanges, "")
	noSecrets(t, []string{out, errs}, "reader-pw-secret")
}

func TestConnectFailures(t *testing.T) {
	cleanEnv(t)
	noJS := natstest.Start(t, natstest.WithoutJetStream)
	code, out, errs := lanes(t, applyArgs("--server", noJS.URL())...)
	expect(t, code, out, errs, commands.ExitNoJetStream, "JetStream is not enabled")

	code, out, errs = lanes(t, applyArgs("--server", "nats://127.0.0.1:1")...)
	expect(t, code, out, errs, commands.ExitConnect, "cannot connect")

	// Something answers nothing on the JetStream API: the deadline ends it.
	silent := natstest.Start(t, natstest.WithoutJetStream)
	nc, err := nats.Connect(silent.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Subscribe("$JS.API.>", func(*nats.Msg) {})
	nc.Flush()
	start := time.Now()
	code, out, errs = lanes(t, applyArgs("--server", silent.URL(), "--timeout", "300ms")...)
	expect(t, code, out, errs, commands.ExitTimeout, "no answer")
	if time.Since(start) > 3*time.Second {
		t.Fatalf("--timeout 300ms took %s", time.Since(start))
	}
}

func TestConnectToken(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t, natstest.WithToken("tok-SECRET-1234567890"))
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--token", "tok-WRONG-0987654321")...)
	expect(t, code, out, errs, commands.ExitAuth, "authentication failed")
	outs := []string{out, errs}
	code, out, errs = lanes(t, applyArgs("--server", srv.URL(), "--token", "tok-SECRET-1234567890")...)
	expect(t, code, out, errs, 0, "")
	noSecrets(t, append(outs, out, errs), "tok-SECRET-1234567890", "tok-WRONG-0987654321")
}

func TestConnectNKey(t *testing.T) {
	cleanEnv(t)
	seedFile, configure := natstest.NKeyUser(t)
	srv := natstest.Start(t, configure)
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--nkey", seedFile)...)
	expect(t, code, out, errs, 0, "")
	seedText, _ := os.ReadFile(seedFile)
	noSecrets(t, []string{out, errs}, string(seedText))

	code, out, errs = lanes(t, applyArgs("--server", srv.URL())...)
	expect(t, code, out, errs, commands.ExitAuth, "authentication failed")
}

func TestConnectCreds(t *testing.T) {
	cleanEnv(t)
	op := natstest.NewOperator(t)
	srv := natstest.Start(t, op.Configure)
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--creds", op.CredsFile)...)
	expect(t, code, out, errs, 0, "")
	code2, out2, errs2 := lanes(t, append([]string{"apply", "--dry-run", "-o", "json", "--server", srv.URL(), "--creds", op.CredsFile}, seed...)...)
	expect(t, code2, out2, errs2, 0, "")
	creds, _ := os.ReadFile(op.CredsFile)
	noSecrets(t, []string{out, errs, out2, errs2}, op.UserSeed, op.UserJWT, string(creds))

	// No credentials: the operator-mode server refuses.
	code, out, errs = lanes(t, applyArgs("--server", srv.URL())...)
	expect(t, code, out, errs, commands.ExitAuth, "authentication failed")
}

func TestConnectTLS(t *testing.T) {
	cleanEnv(t)
	f := natstest.GenerateTLS(t)
	srv := natstest.Start(t, natstest.WithTLS(t, f, true, false))
	tlsURL := strings.Replace(srv.URL(), "nats://", "tls://", 1)
	code, out, errs := lanes(t, applyArgs("--server", tlsURL, "--tlsca", f.CA, "--tlscert", f.ClientCert, "--tlskey", f.ClientKey)...)
	expect(t, code, out, errs, 0, "")

	// The server wants a client certificate.
	code, _, errs = lanes(t, applyArgs("--server", tlsURL, "--tlsca", f.CA)...)
	if code != commands.ExitConnect {
		t.Fatalf("without a client certificate: exit %d, stderr %s", code, errs)
	}
	// An unknown CA: the certificate problem is named.
	other := natstest.GenerateTLS(t)
	code, out, errs = lanes(t, applyArgs("--server", tlsURL, "--tlsca", other.CA, "--tlscert", f.ClientCert, "--tlskey", f.ClientKey)...)
	expect(t, code, out, errs, commands.ExitConnect, "x509")
	keyPEM, _ := os.ReadFile(f.ClientKey)
	noSecrets(t, []string{out, errs}, string(keyPEM))
}

func TestConnectTLSFirst(t *testing.T) {
	cleanEnv(t)
	f := natstest.GenerateTLS(t)
	srv := natstest.Start(t, natstest.WithTLS(t, f, false, true))
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--tlsca", f.CA, "--tlsfirst", "--timeout", "2s")...)
	expect(t, code, out, errs, 0, "")
	code, _, errs = lanes(t, applyArgs("--server", srv.URL(), "--tlsca", f.CA, "--timeout", "1s")...)
	if code != commands.ExitConnect {
		t.Fatalf("a handshake-first server without --tlsfirst: exit %d, %s", code, errs)
	}
}

// TestConnectContext: natscli contexts, the selected one and by name, with
// flags overriding the context; the context's password never shows.
func TestConnectContext(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t, natstest.WithUsers(natstest.User{Name: "ctxuser", Password: "ctx-pw-SECRET"}))
	home := os.Getenv("XDG_CONFIG_HOME")
	dir := filepath.Join(home, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("prod", `{"url": "`+srv.URL()+`", "user": "ctxuser", "password": "ctx-pw-SECRET"}`)
	write("broken", `{"url": "`+srv.URL()+`", "user": "ctxuser", "password": "not-it-SECRET"}`)
	var outs []string
	check := func(wantCode int, args ...string) {
		t.Helper()
		code, out, errs := lanes(t, args...)
		outs = append(outs, out, errs)
		if code != wantCode {
			t.Fatalf("lanes %v: exit %d (want %d): %s", args, code, wantCode, errs)
		}
	}
	check(0, applyArgs("--context", "prod")...)
	check(commands.ExitAuth, applyArgs("--context", "broken")...)
	check(0, applyArgs("--context", "broken", "--password", "ctx-pw-SECRET")...) // flags override the context
	check(commands.ExitUsage, applyArgs("--context", "missing")...)
	if err := os.WriteFile(filepath.Join(home, "nats", "context.txt"), []byte("prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	check(0, applyArgs()...) // the selected context
	t.Setenv("NATS_CONTEXT", "broken")
	check(commands.ExitAuth, applyArgs()...)
	noSecrets(t, outs, "ctx-pw-SECRET", "not-it-SECRET")
}

// TestSecretsNotInHelp: secrets from the environment are not echoed as
// flag defaults in --help.
func TestSecretsNotInHelp(t *testing.T) {
	cleanEnv(t)
	t.Setenv("NATS_PASSWORD", "env-pw-SECRET")
	t.Setenv("NATS_TOKEN", "env-token-SECRET")
	_, out, errs := lanes(t, "apply", "--help")
	noSecrets(t, []string{out, errs}, "env-pw-SECRET", "env-token-SECRET")
}

// TestConnectJSDomain: with --js-domain every JetStream request goes to
// $JS.<domain>.API: the server's domain works, another domain answers
// nothing (exit 13).
func TestConnectJSDomain(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
	code, out, errs := lanes(t, applyArgs("--server", srv.URL(), "--js-domain", "hub")...)
	expect(t, code, out, errs, 0, "")
	code, out, errs = lanes(t, applyArgs("--server", srv.URL(), "--js-domain", "hub")...)
	expect(t, code, out, errs, 0, "")
	if !strings.Contains(out, "Nothing to do") {
		t.Fatalf("the second apply through the domain must find the lanes: %s", out)
	}
	code, out, errs = lanes(t, applyArgs("--server", srv.URL(), "--js-domain", "nowhere", "--timeout", "1s")...)
	expect(t, code, out, errs, commands.ExitNoJetStream, "domain \"nowhere\"")
}

// writeContext writes a natscli context file under $XDG_CONFIG_HOME.
func writeContext(t *testing.T, name, body string) {
	t.Helper()
	dir := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConnectConfigErrors: a wrong setting is a configuration error (exit
// 2) naming the flag or context field, found before connecting.
func TestConnectConfigErrors(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	f := natstest.GenerateTLS(t)
	missing := filepath.Join(t.TempDir(), "nope")
	writeContext(t, "garbled", `{"url": "`+srv.URL()+`", `)
	writeContext(t, "socks", `{"url": "`+srv.URL()+`", "socks_proxy": "socks5://proxy:1080"}`)
	writeContext(t, "badcreds", `{"url": "`+srv.URL()+`", "creds": "`+missing+`"}`)
	writeContext(t, "badkey", `{"url": "`+srv.URL()+`", "cert": "`+f.ClientCert+`"}`)
	writeContext(t, "wrongtype", `{"url": 42}`)
	writeContext(t, "domainprefix", `{"url": "`+srv.URL()+`", "jetstream_domain": "hub", "jetstream_api_prefix": "$JS.hub.API"}`)
	writeContext(t, "nsc", `{"nsc": "nsc://op/acc/user"}`)
	s := []string{"--server", srv.URL()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(s, "--creds", missing), "--creds " + missing + ": cannot read the file: no such file"},
		{append(s, "--creds", writeFile(t, "x.creds", "not creds")), "not a NATS credentials file"},
		{append(s, "--nkey", missing), "--nkey " + missing + ": cannot read the file"},
		{append(s, "--tlscert", f.ClientCert), "--tlscert is set but --tlskey is not"},
		{append(s, "--tlskey", f.ClientKey), "--tlskey is set but --tlscert is not"},
		{append(s, "--tlscert", missing, "--tlskey", f.ClientKey), "--tlscert " + missing + ": cannot read the file: no such file"},
		{append(s, "--tlscert", f.ClientCert, "--tlskey", f.CA), "not a certificate and its private key"},
		{append(s, "--tlsca", missing), "--tlsca " + missing},
		{append(s, "--tlsca", writeFile(t, "ca.pem", "nothing")), "no PEM certificate"},
		{[]string{"--context", "missing"}, `NATS context "missing" not found`},
		{[]string{"--context", "../etc"}, "not valid"},
		{[]string{"--context", "garbled"}, "not valid JSON"},
		{[]string{"--context", "wrongtype"}, `field "url" has the wrong type`},
		{[]string{"--context", "socks"}, `NATS context "socks" field "socks_proxy" is set`},
		{[]string{"--context", "badcreds"}, `context "badcreds" field "creds" ` + missing},
		{[]string{"--context", "badkey"}, `context "badkey" field "cert" is set but field "key" is not`},
		{[]string{"--context", "domainprefix"}, "a JetStream domain and an API prefix"},
		{[]string{"--context", "nsc"}, `field "nsc" (nsc://op/acc/user): no credentials at`},
		{append(s, "--timeout", "0s"), "--timeout 0s: must be a positive duration"},
		{append(s, "--timeout", "-1s"), "--timeout -1s: must be a positive duration"},
	} {
		for _, cmd := range [][]string{{"inspect", "--stream", "ORDERS"}, {"apply", "--dry-run", "-f", "../examples/seed/lanes.yaml"}} {
			code, out, errs := lanes(t, append(cmd, tc.args...)...)
			if code != commands.ExitUsage || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("lanes %s %v: exit %d, stderr %q; want exit 2 and %q", cmd[0], tc.args, code, errs, tc.want)
			}
		}
	}
}

// TestContextFields: natscli context fields lanes honours, each shown to
// work against a server that needs it.
func TestContextFields(t *testing.T) {
	cleanEnv(t)
	t.Run("user_jwt", func(t *testing.T) {
		op := natstest.NewOperator(t)
		srv := natstest.Start(t, op.Configure)
		seedFile := writeFile(t, "user.nk", op.UserSeed)
		writeContext(t, "jwtseed", `{"url": "`+srv.URL()+`", "user_jwt": "`+op.UserJWT+`", "user_seed": "`+op.UserSeed+`"}`)
		writeContext(t, "jwtnkey", `{"url": "`+srv.URL()+`", "user_jwt": "`+op.UserJWT+`", "nkey": "`+seedFile+`"}`)
		for _, name := range []string{"jwtseed", "jwtnkey"} {
			code, out, errs := lanes(t, "apply", "--dry-run", "-f", "../examples/seed/lanes.yaml", "--context", name)
			expect(t, code, out, errs, commands.ExitChanges, "")
			noSecrets(t, []string{out, errs}, op.UserSeed, op.UserJWT)
		}
	})
	t.Run("inbox_prefix", func(t *testing.T) {
		// This user may only receive replies under _PRIV: the default
		// _INBOX fails, the context's inbox prefix works.
		u := natstest.User{Name: "priv", Password: "priv-pw", Publish: []string{"$JS.API.>"}, Subscribe: []string{"_PRIV.>"}}
		srv := natstest.Start(t, natstest.WithUsers(u))
		writeContext(t, "priv", `{"url": "`+srv.URL()+`", "user": "priv", "password": "priv-pw", "inbox_prefix": "_PRIV"}`)
		writeContext(t, "noprefix", `{"url": "`+srv.URL()+`", "user": "priv", "password": "priv-pw"}`)
		code, out, errs := lanes(t, "apply", "--dry-run", "-f", "../examples/seed/lanes.yaml", "--context", "priv")
		expect(t, code, out, errs, commands.ExitChanges, "")
		code, _, errs = lanes(t, "apply", "--dry-run", "-f", "../examples/seed/lanes.yaml", "--context", "noprefix", "--timeout", "1s")
		if code == commands.ExitChanges {
			t.Fatalf("without the prefix the replies cannot arrive, yet it worked: %s", errs)
		}
	})
	t.Run("jetstream_api_prefix", func(t *testing.T) {
		srv := natstest.Start(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
		writeContext(t, "hub", `{"url": "`+srv.URL()+`", "jetstream_api_prefix": "$JS.hub.API"}`)
		code, out, errs := lanes(t, applyArgs("--context", "hub")...)
		expect(t, code, out, errs, 0, "")
		code, out, errs = lanes(t, "inspect", "--stream", "ORDERS", "--context", "hub", "-o", "json")
		expect(t, code, out, errs, 0, "")
	})
	t.Run("nsc", func(t *testing.T) {
		op := natstest.NewOperator(t)
		srv := natstest.Start(t, op.Configure)
		keys := t.TempDir()
		t.Setenv("NKEYS_PATH", keys)
		creds, _ := os.ReadFile(op.CredsFile)
		dir := filepath.Join(keys, "creds", "op", "acc")
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "app.creds"), creds, 0o600)
		writeContext(t, "nsc", `{"url": "`+srv.URL()+`", "nsc": "nsc://op/acc/app"}`)
		code, out, errs := lanes(t, "apply", "--dry-run", "-f", "../examples/seed/lanes.yaml", "--context", "nsc")
		expect(t, code, out, errs, commands.ExitChanges, "")
		noSecrets(t, []string{out, errs}, op.UserSeed, op.UserJWT)
	})
}

// TestSelectedContextEverywhere: natscli's selected context is used by
// every command that connects when it can (simulate too); plan still
// connects only with --server or --context on its command line.
func TestSelectedContextEverywhere(t *testing.T) {
	cleanEnv(t)
	srv := natstest.Start(t)
	writeContext(t, "sel", `{"url": "`+srv.URL()+`"}`)
	os.WriteFile(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "nats", "context.txt"), []byte("sel\n"), 0o600)
	code, out, errs := lanes(t, applyArgs()...)
	expect(t, code, out, errs, 0, "")
	nc, _ := natstest.Connect(t, srv.URL())
	for i := 0; i < 20; i++ {
		nc.Publish(fmt.Sprintf("msgs.received_from.user%d", i), nil)
	}
	nc.Flush()
	code, out, errs = lanes(t, "simulate", "-f", "../examples/seed/lanes.yaml", "--from-stream", "ORDERS", "--messages", "50", "-o", "json")
	expect(t, code, out, errs, 0, "")
	if !strings.Contains(out, `"keys_from": "stream ORDERS"`) {
		t.Fatalf("simulate did not read the stream through the selected context: %s", out)
	}
	code, out, errs = lanes(t, "plan", "-f", "../examples/seed/lanes.yaml")
	expect(t, code, out, errs, 0, "")
	if strings.Contains(out, "Nothing to do") || strings.Contains(out, "unchanged") {
		t.Fatalf("plan connected without --server/--context: %s", out)
	}
}

// TestSecretsNeverShown runs every command that connects with every kind
// of credential, wrong in several ways, and looks for each secret in
// stdout and stderr: passwords, tokens, nkey seeds (inline, in NATS_NKEY,
// in files, in contexts), credentials files, user JWTs and TLS keys.
func TestSecretsNeverShown(t *testing.T) {
	cleanEnv(t)
	_, trusted := natstest.NKeyUser(t)
	srv := natstest.Start(t, natstest.WithUsers(natstest.User{Name: "alice", Password: "right-pw-S3CRET"}), trusted)
	url := srv.URL()
	other := natstest.NewOperator(t) // valid credentials this server does not trust
	otherCreds, _ := os.ReadFile(other.CredsFile)
	strangerSeed := func() string {
		kp, _ := nkeys.CreateUser()
		s, _ := kp.Seed()
		return string(s)
	}
	seedInline, seedEnv, seedInFile, seedCtx, seedBroken := strangerSeed(), strangerSeed(), strangerSeed(), strangerSeed(), strangerSeed()
	seedBroken = seedBroken[:len(seedBroken)-4] + "AAAA" // fails its checksum
	f := natstest.GenerateTLS(t)
	keyPEM, _ := os.ReadFile(f.ClientKey)
	secrets := []string{"wrong-pw-S3CRET", "env-pw-S3CRET", "url-pw-S3CRET", "ctx-pw-S3CRET", "right-pw-S3CRET",
		"tok-flag-S3CRET", "tok-env-S3CRET", "tok-url-S3CRET", "tok-ctx-S3CRET",
		seedInline, seedEnv, seedInFile, seedCtx, seedBroken, seedBroken[:20], seedInline[:20],
		"garbage-seed-file-S3CRET", "garbage-creds-S3CRET", other.UserSeed, other.UserJWT, string(otherCreds),
		"ctx-jwt-S3CRET", string(keyPEM), "garbage-key-S3CRET"}
	writeContext(t, "pw", `{"url": "`+url+`", "user": "alice", "password": "ctx-pw-S3CRET"}`)
	writeContext(t, "tok", `{"url": "`+url+`", "token": "tok-ctx-S3CRET"}`)
	writeContext(t, "seed", `{"url": "`+url+`", "nkey": "`+seedCtx+`"}`)
	writeContext(t, "creds", `{"url": "`+url+`", "creds": "`+other.CredsFile+`"}`)
	writeContext(t, "jwt", `{"url": "`+url+`", "user_jwt": "ctx-jwt-S3CRET", "user_seed": "`+seedCtx+`"}`)
	writeContext(t, "jwtother", `{"url": "`+url+`", "user_jwt": "`+other.UserJWT+`", "user_seed": "`+other.UserSeed+`"}`)
	userURL := strings.Replace(url, "nats://", "nats://alice:url-pw-S3CRET@", 1)
	tokenURL := strings.Replace(url, "nats://", "nats://tok-url-S3CRET@", 1)
	type credCase struct {
		name string
		env  map[string]string
		args []string
	}
	cases := []credCase{
		{"password flag", nil, []string{"-s", url, "--user", "alice", "--password", "wrong-pw-S3CRET"}},
		{"password env", map[string]string{"NATS_PASSWORD": "env-pw-S3CRET"}, []string{"-s", url, "--user", "alice"}},
		{"password in URL", nil, []string{"-s", userURL}},
		{"password in context", nil, []string{"--context", "pw"}},
		{"token flag", nil, []string{"-s", url, "--token", "tok-flag-S3CRET"}},
		{"token env", map[string]string{"NATS_TOKEN": "tok-env-S3CRET"}, []string{"-s", url}},
		{"token in URL", nil, []string{"-s", tokenURL}},
		{"token in context", nil, []string{"--context", "tok"}},
		{"nkey seed inline", nil, []string{"-s", url, "--nkey", seedInline}},
		{"nkey seed broken", nil, []string{"-s", url, "--nkey", seedBroken}},
		{"nkey seed prefix", nil, []string{"-s", url, "--nkey", seedInline[:20]}},
		{"nkey seed env", map[string]string{"NATS_NKEY": seedEnv}, []string{"-s", url}},
		{"nkey seed file", nil, []string{"-s", url, "--nkey", writeFile(t, "u.nk", seedInFile)}},
		{"nkey garbage file", nil, []string{"-s", url, "--nkey", writeFile(t, "g.nk", "garbage-seed-file-S3CRET")}},
		{"nkey in context", nil, []string{"--context", "seed"}},
		{"creds untrusted", nil, []string{"-s", url, "--creds", other.CredsFile}},
		{"creds garbage", nil, []string{"-s", url, "--creds", writeFile(t, "g.creds", "garbage-creds-S3CRET")}},
		{"creds env", map[string]string{"NATS_CREDS": other.CredsFile}, []string{"-s", url}},
		{"creds in context", nil, []string{"--context", "creds"}},
		{"user_jwt garbage in context", nil, []string{"--context", "jwt"}},
		{"user_jwt untrusted in context", nil, []string{"--context", "jwtother"}},
		{"tls key garbage", nil, []string{"-s", url, "--tlscert", f.ClientCert, "--tlskey", writeFile(t, "k.pem", "garbage-key-S3CRET")}},
		{"tls key real, server without TLS", nil, []string{"-s", url, "--tlscert", f.ClientCert, "--tlskey", f.ClientKey, "--timeout", "1s"}},
	}
	design := "../examples/seed/lanes.yaml"
	commandsUnderTest := [][]string{
		{"plan", "-f", design},
		{"apply", "--yes", "-f", design},
		{"apply", "--dry-run", "-f", design},
		{"inspect", "--stream", "ORDERS"},
		{"inspect", "-f", design, "-o", "json"},
		{"simulate", "-f", design, "--live", "--messages", "5"},
		{"simulate", "-f", design, "--from-stream", "ORDERS"},
	}
	for _, cc := range cases {
		for _, cmd := range commandsUnderTest {
			t.Run(cc.name+"/"+strings.Join(cmd[:2], " "), func(t *testing.T) {
				for k, v := range cc.env {
					t.Setenv(k, v)
				}
				args := append(append([]string{}, cmd...), cc.args...)
				if cmd[0] == "plan" && cc.env != nil {
					args = append(args, "-s", url) // plan ignores NATS_URL; the env credential still applies
				}
				code, out, errs := lanes(t, args...)
				t.Logf("exit %d: %s", code, errs)
				if code == 0 || code == commands.ExitChanges {
					t.Fatalf("a wrong credential was accepted: exit %d\n%s", code, errs)
				}
				if code != commands.ExitUsage && code != commands.ExitAuth && code != commands.ExitConnect {
					t.Errorf("exit %d, want 2 (bad setting), 10 or 11: %s", code, errs)
				}
				noSecrets(t, []string{out, errs}, secrets...)
			})
		}
	}
}
