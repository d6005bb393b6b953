package commands_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
	for _, v := range []string{"NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CERT", "NATS_KEY", "NATS_CA"} {
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
	code, out, errs = lanes(t, applyArgs("--server", tlsURL, "--tlsca", f.CA)...)
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
	check(commands.ExitConnect, applyArgs("--context", "missing")...)
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
