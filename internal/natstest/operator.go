package natstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Operator is a decentralized-auth (operator/JWT) setup made for one test:
// an operator, a system account, an account with JetStream, and a user of
// that account whose credentials file apps log in with.
type Operator struct {
	CredsFile string
	UserSeed  string // the user's nkey seed, which the creds file contains
	UserJWT   string
	Configure func(*server.Options)
}

// NewOperator generates keys and JWTs with github.com/nats-io/jwt/v2.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	opKP, err := nkeys.CreateOperator()
	must(err)
	opPub, _ := opKP.PublicKey()
	op := jwt.NewOperatorClaims(opPub)
	op.Name = "lanes-test"

	sysKP, err := nkeys.CreateAccount()
	must(err)
	sysPub, _ := sysKP.PublicKey()
	sys := jwt.NewAccountClaims(sysPub)
	sys.Name = "SYS"
	sysJWT, err := sys.Encode(opKP)
	must(err)
	op.SystemAccount = sysPub
	if _, err := op.Encode(opKP); err != nil {
		t.Fatal(err)
	}

	accKP, err := nkeys.CreateAccount()
	must(err)
	accPub, _ := accKP.PublicKey()
	acc := jwt.NewAccountClaims(accPub)
	acc.Name = "APP"
	acc.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accJWT, err := acc.Encode(opKP)
	must(err)

	userKP, err := nkeys.CreateUser()
	must(err)
	userPub, _ := userKP.PublicKey()
	user := jwt.NewUserClaims(userPub)
	user.Name = "app"
	user.IssuerAccount = accPub
	userJWT, err := user.Encode(accKP)
	must(err)
	seed, _ := userKP.Seed()
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	must(err)
	o := &Operator{CredsFile: filepath.Join(t.TempDir(), "app.creds"), UserSeed: string(seed), UserJWT: userJWT}
	must(os.WriteFile(o.CredsFile, creds, 0o600))

	resolver := &server.MemAccResolver{}
	must(resolver.Store(sysPub, sysJWT))
	must(resolver.Store(accPub, accJWT))
	o.Configure = func(so *server.Options) {
		so.TrustedOperators = []*jwt.OperatorClaims{op}
		so.AccountResolver = resolver
		so.SystemAccount = sysPub
	}
	return o
}
