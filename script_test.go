package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/embedded"
	"github.com/lanes-dev/lanes/membership"
)

// TestMain lets scripts run "lanes" as a real command: this test binary,
// re-executed, runs the same commands.Main as the lanes binary.
// Its exit code also goes to $LANES_EXIT_FILE, for the scripts' exitcode.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"lanes": func() {
			code := commands.Main(os.Args, os.Stdin, os.Stdout, os.Stderr)
			if f := os.Getenv("LANES_EXIT_FILE"); f != "" {
				os.WriteFile(f, []byte(strconv.Itoa(code)), 0o644)
			}
			os.Exit(code)
		},
	})
}

// TestScripts runs the end-to-end scripts, as a user types the commands:
// testdata/script (one per command, and the inputs), and testdata/cli
// (the command-line conventions: help, version, completion, man page). A
// script that needs a nats-server starts its own with `server`; the others
// have none ($NATS_URL points where nothing listens, so a script that
// forgets `server` fails at once instead of finding another server).
//
// Expected output lives in the scripts, compared with cmp after `mask`
// (see scriptCmds); UPDATE_SCRIPTS=1 go test -run TestScripts . rewrites
// it in the .txtar files after an intended change.
func TestScripts(t *testing.T) {
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goEnv := goCaches()
	for _, dir := range []string{"testdata/script", "testdata/cli"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			testscript.Run(t, testscript.Params{
				Dir:           dir,
				UpdateScripts: os.Getenv("UPDATE_SCRIPTS") != "",
				Cmds:          scriptCmds,
				Condition: func(cond string) (bool, error) {
					if cond != "gitclone" {
						return false, fmt.Errorf("unknown condition %q", cond)
					}
					// go build stamps no VCS information in a linked worktree
					// (.git is a file there): only a plain clone can show it.
					st, err := os.Stat(filepath.Join(repo, ".git"))
					return err == nil && st.IsDir(), nil
				},
				Setup: func(env *testscript.Env) error {
					env.Setenv("REPO", repo)
					env.Setenv("NO_COLOR", "1")
					env.Setenv("XDG_CONFIG_HOME", env.WorkDir+"/.config")
					env.Setenv("NATS_URL", "nats://127.0.0.1:1") // nothing listens: see `server`
					env.Setenv("LANES_EXIT_FILE", env.WorkDir+"/.exitcode")
					for k, v := range goEnv {
						env.Setenv(k, v)
					}
					return nil
				},
			})
		})
	}
}

// scriptCmds are the scripts' own commands.
//
//	server                      start a nats-server with JetStream for this script; $NATS_URL names it
//	exitcode N                  the last lanes command (not in the background) exited with code N
//	publish SUBJECT PAYLOAD...  publish to JetStream (a stream must store SUBJECT), one message per payload, in order
//	waitbacklog STREAM N        wait (up to 30s) until the stream's consumers count N messages not yet
//	                            acknowledged (the server counts a publish after its ack, asynchronously)
//	rmconsumer STREAM NAME      delete a consumer, as nats consumer rm does
//	waitlines FILE N            wait (up to 30s) until FILE has N lines
//	waitserving STREAM DESIGN INSTANCE...
//	                            wait (up to 30s) until the instances of lanes work named are live members
//	                            of the design's membership and every lane recorded there is served by one
//	                            of them, split evenly: the lanes are settled before the script publishes;
//	                            INSTANCE * is the one live member, whatever its name
//	sleep DURATION              let a background command run (a --watch shows its output only when
//	                            it ends); never for correctness: it only gives the command time
//	mask [-table] SRC DST [REGEXP...]
//	                            copy SRC (stdout, stderr or a file) to DST with the volatile parts masked
//	                            as '*': the server URL (as $NATS_URL), RFC 3339 times and clock times
//	                            always, and each REGEXP's matches (its first group, when it has one);
//	                            -table squeezes runs of spaces and of '─', so a table's column widths
//	                            do not depend on the values masked
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"server": func(ts *testscript.TestScript, neg bool, args []string) {
		srv, err := embedded.Start(embedded.Options(ts.MkAbs(".nats")))
		ts.Check(err)
		ts.Defer(srv.Stop)
		ts.Setenv("NATS_URL", srv.ClientURL())
	},
	"exitcode": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 1 {
			ts.Fatalf("usage: exitcode N")
		}
		if got := strings.TrimSpace(ts.ReadFile(".exitcode")); got != args[0] {
			ts.Fatalf("lanes exited %s, want %s", got, args[0])
		}
	},
	"publish": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 2 {
			ts.Fatalf("usage: publish SUBJECT PAYLOAD...")
		}
		nc, err := nats.Connect(ts.Getenv("NATS_URL"))
		ts.Check(err)
		defer nc.Close()
		for _, payload := range args[1:] {
			msg, err := nc.Request(args[0], []byte(payload), 5*time.Second) // the stream's ack
			ts.Check(err)
			if strings.Contains(string(msg.Data), `"error"`) {
				ts.Fatalf("publish %s: %s", args[0], msg.Data)
			}
		}
	},
	"waitbacklog": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: waitbacklog STREAM N")
		}
		want, err := strconv.ParseUint(args[1], 10, 64)
		ts.Check(err)
		nc, err := nats.Connect(ts.Getenv("NATS_URL"))
		ts.Check(err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		ts.Check(err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var got uint64
		for ctx.Err() == nil {
			got = 0
			s, err := js.Stream(ctx, args[0])
			ts.Check(err)
			for ci := range s.ListConsumers(ctx).Info() {
				got += ci.NumPending + uint64(ci.NumAckPending)
			}
			if got == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		ts.Fatalf("stream %s: backlog %d after 30s, want %d", args[0], got, want)
	},
	"rmconsumer": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: rmconsumer STREAM NAME")
		}
		nc, err := nats.Connect(ts.Getenv("NATS_URL"))
		ts.Check(err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		ts.Check(err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.Check(js.DeleteConsumer(ctx, args[0], args[1]))
	},
	"waitlines": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 2 {
			ts.Fatalf("usage: waitlines FILE N")
		}
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		lines := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			data, _ := os.ReadFile(ts.MkAbs(args[0]))
			if lines = strings.Count(string(data), "\n"); lines >= n {
				return
			}
		}
		ts.Fatalf("%s has %d lines after 30s, want %d", args[0], lines, n)
	},
	"waitserving": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) < 3 {
			ts.Fatalf("usage: waitserving STREAM DESIGN INSTANCE...")
		}
		nc, err := nats.Connect(ts.Getenv("NATS_URL"))
		ts.Check(err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		ts.Check(err)
		var last string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sv, err := membership.ReadServing(ctx, js, args[0], args[1])
			cancel()
			if err != nil {
				last = err.Error()
				continue
			}
			if last = settledOn(sv, args[2:]); last == "" {
				return
			}
		}
		ts.Fatalf("the lanes of %s on %s not settled on %v after 30s: %s", args[1], args[0], args[2:], last)
	},
	"sleep": func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 1 {
			ts.Fatalf("usage: sleep DURATION")
		}
		d, err := time.ParseDuration(args[0])
		ts.Check(err)
		time.Sleep(d)
	},
	"mask": func(ts *testscript.TestScript, neg bool, args []string) {
		table := len(args) > 0 && args[0] == "-table"
		if table {
			args = args[1:]
		}
		if len(args) < 2 {
			ts.Fatalf("usage: mask [-table] SRC DST [REGEXP...]")
		}
		text := ts.ReadFile(args[0])
		text = strings.ReplaceAll(text, ts.Getenv("NATS_URL"), "$NATS_URL")
		masks := append([]string{
			`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)`, // RFC 3339
			`\b\d\d:\d\d:\d\d\b`, // a clock
		}, args[2:]...)
		for _, m := range masks {
			re, err := regexp.Compile(m)
			ts.Check(err)
			text = re.ReplaceAllStringFunc(text, func(s string) string {
				sub := re.FindStringSubmatchIndex(s)
				if len(sub) >= 4 && sub[2] >= 0 {
					return s[:sub[2]] + "*" + s[sub[3]:]
				}
				return "*"
			})
		}
		if table {
			text = regexp.MustCompile(` {2,}`).ReplaceAllString(text, "  ")
			text = regexp.MustCompile(`─{2,}`).ReplaceAllString(text, "──")
		}
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(text), 0o644))
	},
}

// settledOn says why the lanes in sv are not settled on instances (every
// one a live member serving its even share, every lane served by one of
// them), or "" when they are.
func settledOn(sv *membership.Serving, instances []string) string {
	if len(instances) == 1 && instances[0] == "*" {
		if len(sv.Members) != 1 {
			return fmt.Sprintf("%d live members, want one", len(sv.Members))
		}
		instances = []string{sv.Members[0].Instance}
	}
	live := map[string]bool{}
	for _, m := range sv.Members {
		live[m.Instance] = true
	}
	share := map[string]int{}
	for _, name := range instances {
		if !live[name] {
			return name + " is not a live member"
		}
		share[name] = 0
	}
	for lane, l := range sv.Lanes {
		if _, ok := share[l.Instance]; !ok || l.Released || l.Gone {
			return fmt.Sprintf("lane %s: %+v", lane, l)
		}
		share[l.Instance]++
	}
	lo, hi := len(sv.Lanes), 0
	for _, n := range share {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi-lo > 1 || lo == 0 {
		return fmt.Sprintf("lanes per instance %v", share)
	}
	return ""
}

// goCaches are the go command's caches: scripts run with HOME=/no-home,
// where a go build would start from an empty cache.
func goCaches() map[string]string {
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH"}
	out, err := exec.CommandContext(context.Background(), "go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return nil // no go command: the scripts that need it skip
	}
	env := map[string]string{}
	for i, v := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if i < len(names) {
			env[names[i]] = v
		}
	}
	return env
}
