package natstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// User is a user/password login with optional permissions. Nil Publish or
// Subscribe means "everything".
type User struct {
	Name        string
	Password    string
	Publish     []string // subjects the user may publish to
	Subscribe   []string // subjects the user may subscribe to
	DenyPublish []string // subjects the user may not publish to (with Publish nil: everything else)
}

// WithUsers configures user/password logins (in the global account, where
// JetStream is enabled).
func WithUsers(users ...User) func(*server.Options) {
	return func(o *server.Options) {
		for _, u := range users {
			su := &server.User{Username: u.Name, Password: u.Password}
			if u.Publish != nil || u.Subscribe != nil || u.DenyPublish != nil {
				su.Permissions = &server.Permissions{}
				if u.Publish != nil || u.DenyPublish != nil {
					su.Permissions.Publish = &server.SubjectPermission{Allow: u.Publish, Deny: u.DenyPublish}
				}
				if u.Subscribe != nil {
					su.Permissions.Subscribe = &server.SubjectPermission{Allow: u.Subscribe}
				}
			}
			o.Users = append(o.Users, su)
		}
	}
}

// ReadOnlyJetStream is what a user needs to read lanes but not change them:
// stream and consumer info and listing, and replies to its inbox.
var ReadOnlyJetStream = User{
	Publish:   []string{"$JS.API.INFO", "$JS.API.STREAM.INFO.>", "$JS.API.CONSUMER.LIST.>", "$JS.API.CONSUMER.INFO.>"},
	Subscribe: []string{"_INBOX.>"},
}

// WithToken requires a token to connect.
func WithToken(token string) func(*server.Options) {
	return func(o *server.Options) { o.Authorization = token }
}

// NKeyUser makes a user nkey, writes its seed to a file and returns the
// file and the server option that trusts the key.
func NKeyUser(t testing.TB) (seedFile string, configure func(*server.Options)) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, func(o *server.Options) {
		o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: pub})
	}
}

// WithoutJetStream turns JetStream off, for "JetStream not enabled" cases.
func WithoutJetStream(o *server.Options) { o.JetStream = false }
