package planner_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/planner"
)

// parityCases cover single and multi-token keys (in non-natural argument
// order), power-of-two and other partition counts.
var parityCases = []struct {
	name      string
	subject   string
	keyTokens []int
	n         int
}{
	{"seed-8", "msgs.received_from.*", nil, 8},
	{"seed-7", "msgs.received_from.*", nil, 7},
	{"seed-1", "msgs.received_from.*", nil, 1},
	{"two-tokens-13", "dev.*.evt.*", []int{2, 1}, 13},
	{"two-of-three-100", "t.*.*.*", []int{3, 1}, 100},
}

// generatedKey makes keys of varied length and bytes, including UTF-8.
func generatedKey(r *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:=@éü日本"
	runes := []rune(alphabet)
	n := 1 + r.IntN(20)
	out := make([]rune, n)
	for i := range out {
		out[i] = runes[r.IntN(len(runes))]
	}
	return string(out)
}

func generatedSubject(r *rand.Rand, pattern string) string {
	toks := []byte(pattern)
	out := ""
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && toks[i] != '.' {
			continue
		}
		tok := pattern[start:i]
		if tok == "*" {
			tok = generatedKey(r)
		}
		if out != "" {
			out += "."
		}
		out += tok
		start = i + 1
	}
	return out
}

// TestPartitionParityStreamTransform publishes generated subjects into a
// stream that carries the planner's subject transform and checks that the
// server stored each one exactly where the planner says.
func TestPartitionParityStreamTransform(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := natstest.Connect(t, srv.URL())
	natstest.KeepAccountStreams(t, js)
	ctx := context.Background()
	for _, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planner.New(planner.Design{Name: tc.name, Subject: tc.subject, KeyTokens: tc.keyTokens, Partitions: tc.n})
			if err != nil {
				t.Fatal(err)
			}
			createFromDefinition(t, nc, p.Stream)
			const count = 3000
			r := rand.New(rand.NewPCG(uint64(tc.n), 42))
			want := make([]string, count)
			for i := range want {
				subj := generatedSubject(r, tc.subject)
				stored, ok := p.Layout.Transform(subj)
				if !ok {
					t.Fatalf("planner rejects its own generated subject %q", subj)
				}
				want[i] = stored
				if _, err := js.PublishAsync(subj, nil); err != nil {
					t.Fatal(err)
				}
			}
			waitAsync(t, js)
			got := storedSubjects(t, ctx, js, p.Stream.Name, count)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("message %d: server stored %q, planner computed %q", i+1, got[i], want[i])
				}
			}
		})
	}
}

// TestPartitionParityAccountMapping installs the planner's mapping as an
// account mapping and checks where core NATS delivers each publish, and that
// an account-mode stream stores it under the same subject.
func TestPartitionParityAccountMapping(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := natstest.Connect(t, srv.URL())
	natstest.KeepAccountStreams(t, js)
	ctx := context.Background()
	for _, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planner.New(planner.Design{Name: tc.name, Subject: tc.subject, KeyTokens: tc.keyTokens,
				Partitions: tc.n, Mapping: planner.MappingAccount})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.GlobalAccount().AddMapping(p.Mapping.Source, p.Mapping.Destination); err != nil {
				t.Fatalf("server rejects the planned mapping: %v", err)
			}
			createFromDefinition(t, nc, p.Stream)
			sub, err := nc.SubscribeSync(p.Layout.Pattern())
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			const count = 2000
			r := rand.New(rand.NewPCG(uint64(tc.n), 7))
			want := make([]string, count)
			for i := range want {
				subj := generatedSubject(r, tc.subject)
				want[i], _ = p.Layout.Transform(subj)
				if _, err := js.PublishAsync(subj, nil); err != nil {
					t.Fatal(err)
				}
			}
			waitAsync(t, js)
			for i := range want {
				m, err := sub.NextMsg(5 * time.Second)
				if err != nil {
					t.Fatalf("message %d: %v", i+1, err)
				}
				if m.Subject != want[i] {
					t.Fatalf("message %d: delivered on %q, planner computed %q", i+1, m.Subject, want[i])
				}
			}
			got := storedSubjects(t, ctx, js, p.Stream.Name, count)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("message %d: stream stored %q, planner computed %q", i+1, got[i], want[i])
				}
			}
		})
	}
}

// createFromDefinition sends the planner's stream definition to the server
// as it is, through the raw API, the way natscli's --config would.
func createFromDefinition(t *testing.T, nc *nats.Conn, cfg planner.StreamConfig) {
	t.Helper()
	body, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apiRequest(t, nc, "$JS.API.STREAM.CREATE."+cfg.Name, body)
	t.Cleanup(func() { apiRequest(t, nc, "$JS.API.STREAM.DELETE."+cfg.Name, nil) })
}

func apiRequest(t *testing.T, nc *nats.Conn, subject string, body []byte) {
	t.Helper()
	msg, err := nc.Request(subject, body, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if resp.Error != nil {
		t.Fatalf("%s rejected the definition: %s (%d)\n%s", subject, resp.Error.Description, resp.Error.Code, body)
	}
}

func waitAsync(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("publishes not acknowledged within 20s")
	}
}

// storedSubjects reads back the subjects of the first n messages.
func storedSubjects(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string, n int) []string {
	t.Helper()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, n)
	for len(out) < n {
		batch, err := c.Fetch(min(500, n-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			out = append(out, m.Subject())
			got++
		}
		if got == 0 {
			t.Fatalf("stream %s returned %d of %d messages", stream, len(out), n)
		}
	}
	return out
}
