package commands

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/sim/strategy"
)

func completeWords(t *testing.T, words ...string) []string {
	t.Helper()
	var out bytes.Buffer
	return complete(context.Background(), newApp(newIO(strings.NewReader(""), &out, &out)), words)
}

// Fixed values come from the flags' own definitions: the command's -o
// formats, the design's choices, the registry's strategies; a flag the
// command does not have offers nothing.
func TestCompletionValuesFromFlagDefinitions(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"plan", "-o", ""}, []string{"conf", "json", "nack", "nsc", "table", "yaml"}},
		{[]string{"apply", "--output", ""}, []string{"json", "table"}},
		{[]string{"inspect", "--output=p"}, []string{"--output=prometheus"}},
		{[]string{"simulate", "-o", ""}, []string{"json", "table"}},
		{[]string{"apply", "--mapping", ""}, []string{"account", "stream"}},
		{[]string{"plan", "--storage", "m"}, []string{"memory"}},
		{[]string{"simulate", "--retention", ""}, []string{"interest", "limits", "workqueue"}},
		{[]string{"simulate", "--strategy", ""}, slices.Sorted(slices.Values(strategy.Names()))},
		{[]string{"inspect", "--strategy=", ""}, nil},
		{[]string{"plan", "-f", ""}, nil},
	} {
		if got := completeWords(t, tc.words...); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// Stream names come from the server the command line names as the command
// would read it: -s, --server, --server=, the environment, a natscli
// context, and the credentials given with them.
func TestCompletionStreamsFromTheTypedServer(t *testing.T) {
	srv := natstest.Start(t, natstest.WithUsers(natstest.User{Name: "ops", Password: "s3cret"}))
	authed := strings.Replace(srv.URL(), "nats://", "nats://ops:s3cret@", 1)
	_, js := natstest.Connect(t, authed)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "nats", "context"), 0o755)
	os.WriteFile(filepath.Join(home, "nats", "context", "prod.json"), []byte(`{"url": "`+authed+`"}`), 0o644)
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CONTEXT", "")

	for _, words := range [][]string{
		{"inspect", "-s", srv.URL(), "--user", "ops", "--password", "s3cret", "--stream", "O"},
		{"inspect", "--server=" + authed, "--stream", ""},
		{"work", "--context", "prod", "--stream", ""},
		{"apply", "--partitions", "4", "--server", authed, "--stream=O"},
	} {
		got := completeWords(t, words...)
		want := "ORDERS"
		if strings.HasPrefix(words[len(words)-1], "--stream=") {
			want = "--stream=ORDERS"
		}
		if !slices.Equal(got, []string{want}) {
			t.Errorf("%q: %q, want %s", words, got, want)
		}
	}
	t.Setenv("NATS_URL", authed) // plan connects only when told, but completion reads the environment
	if got := completeWords(t, "plan", "--stream", ""); !slices.Equal(got, []string{"ORDERS"}) {
		t.Errorf("plan with NATS_URL: %q", got)
	}
	t.Setenv("NATS_URL", "")
	if got := completeWords(t, "inspect", "--stream", ""); got != nil {
		t.Errorf("no server named, yet %q", got)
	}
}
