package connect

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credentials and TLS files are checked before connecting, so that a
// missing or malformed one is a configuration error naming the flag or
// context field (exit 2), not a failed connection. No message quotes a
// secret: not a password, token or seed, not a file's content, and not a
// --nkey value unless it is plainly a path.

// authOptions turns the credentials into nats options.
func authOptions(o Options) ([]nats.Option, error) {
	var opts []nats.Option
	if o.Creds != "" {
		if err := checkCreds(o.Creds); err != nil {
			return nil, configError("%s %s: %v", o.where("creds"), o.Creds, err)
		}
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	var seed []byte
	if o.NKey != "" {
		s, err := readSeed(o.NKey)
		if err != nil {
			return nil, configError("%s%s: %v", o.where("nkey"), shownPath(o.NKey), err)
		}
		seed = s
	}
	if o.UserSeed != "" {
		if _, err := userKeyPair([]byte(o.UserSeed)); err != nil {
			return nil, configError("%s: not a user nkey seed", o.where("user_seed"))
		}
		seed = []byte(o.UserSeed)
	}
	switch {
	case o.UserJWT != "":
		if _, err := jwt.DecodeUserClaims(o.UserJWT); err != nil {
			return nil, configError("%s: not a user JWT", o.where("user_jwt"))
		}
		userJWT := o.UserJWT
		sign := func([]byte) ([]byte, error) { return nil, nil } // a bearer JWT needs no signature
		if seed != nil {
			sign = signer(seed)
		}
		opts = append(opts, nats.UserJWT(func() (string, error) { return userJWT, nil }, sign))
	case seed != nil:
		kp, _ := userKeyPair(seed)
		pub, _ := kp.PublicKey()
		kp.Wipe()
		opts = append(opts, nats.Nkey(pub, signer(seed)))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.InboxPrefix != "" {
		p := o.InboxPrefix
		if !validPrefix(p) {
			return nil, configError("%s %q: not a subject prefix (no wildcards, no empty tokens, no trailing '.')", o.where("inbox_prefix"), p)
		}
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts, nil
}

// checkCreds reads a credentials file and checks that it holds a user JWT
// and a user seed, without saying anything about its content.
func checkCreds(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fileProblem(err)
	}
	defer wipe(data)
	token, err := nkeys.ParseDecoratedJWT(data)
	if err == nil {
		_, err = jwt.DecodeUserClaims(token)
	}
	if err != nil {
		return errors.New("not a NATS credentials file: it has no user JWT (nsc generate creds writes one)")
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return errors.New("not a NATS credentials file: it has no user nkey seed (nsc generate creds writes one)")
	}
	kp.Wipe()
	return nil
}

// readSeed reads a user nkey seed given inline (NATS_NKEY=SU...) or in a file.
func readSeed(v string) ([]byte, error) {
	if strings.HasPrefix(v, "SU") {
		if _, err := userKeyPair([]byte(v)); err == nil {
			return []byte(v), nil
		}
	}
	data, err := os.ReadFile(expandHome(v))
	if err != nil {
		if !looksLikePath(v) {
			return nil, errors.New("neither a readable seed file nor a user nkey seed")
		}
		return nil, fileProblem(err)
	}
	defer wipe(data)
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, errors.New("the file holds no user nkey seed (SU...)")
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return nil, errors.New("the file holds no user nkey seed (SU...)")
	}
	return append([]byte(nil), seed...), nil // Wipe overwrites the key pair's own copy
}

func userKeyPair(seed []byte) (nkeys.KeyPair, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, err
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		kp.Wipe()
		return nil, errors.New("not a user seed")
	}
	return kp, nil
}

// signer signs the server's nonce with the seed.
func signer(seed []byte) nats.SignatureHandler {
	return func(nonce []byte) ([]byte, error) {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, errors.New("the nkey seed cannot sign")
		}
		defer kp.Wipe()
		return kp.Sign(nonce)
	}
}

// shownPath is " PATH" when v is plainly a path, else nothing: a --nkey
// value may be the seed itself, which is never echoed.
func shownPath(v string) string {
	if looksLikePath(v) {
		return " " + v
	}
	return ""
}

// looksLikePath: seeds are base32 (A-Z, 2-7); paths have a separator or a dot.
func looksLikePath(v string) bool { return strings.ContainsAny(v, `/\.~`) }

func fileProblem(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot read the file: %v", err)
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// tlsOptions loads the client certificate and CA once, before connecting.
func tlsOptions(o Options) ([]nats.Option, error) {
	var opts []nats.Option
	if (o.TLSCert == "") != (o.TLSKey == "") {
		given, missing := "cert", "key"
		if o.TLSCert == "" {
			given, missing = "key", "cert"
		}
		absent := o.where(missing)
		if strings.HasPrefix(o.from[given], "context ") {
			absent = fmt.Sprintf("field %q", missing)
		}
		return nil, configError("%s is set but %s is not: a client certificate needs both its certificate and its key", o.where(given), absent)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	secure := false
	if o.TLSCert != "" {
		for _, f := range []string{"cert", "key"} {
			if _, err := os.Stat(*o.field(f)); err != nil {
				return nil, configError("%s %s: %v", o.where(f), *o.field(f), fileProblem(err))
			}
		}
		pair, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, configError("%s %s and %s %s: not a certificate and its private key (%s)", o.where("cert"), o.TLSCert, o.where("key"), o.TLSKey, tlsLoadDetail(err))
		}
		cfg.Certificates, secure = []tls.Certificate{pair}, true
	}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, configError("%s %s: %v", o.where("ca"), o.TLSCA, fileProblem(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configError("%s %s: no PEM certificate in the file", o.where("ca"), o.TLSCA)
		}
		cfg.RootCAs, secure = pool, true
	}
	if secure {
		opts = append(opts, nats.Secure(cfg))
	}
	if o.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts, nil
}

// tlsLoadDetail keeps the crypto/tls reason, which quotes no key material.
func tlsLoadDetail(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "tls: "); i >= 0 {
		return msg[i:]
	}
	return "unreadable PEM"
}

// validPrefix: a literal subject prefix such as _INBOX.private.
func validPrefix(p string) bool {
	if p == "" || strings.HasSuffix(p, ".") {
		return false
	}
	for _, t := range strings.Split(p, ".") {
		if t == "" || t == "*" || t == ">" || strings.ContainsAny(t, " \t\r\n*>") {
			return false
		}
	}
	return true
}
