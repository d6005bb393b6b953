package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
)

// TestMain lets scripts run "lanes" as a real command (this test binary).
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"lanes": func() { os.Exit(commands.Main(os.Args, os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs testdata/script/*.txtar end to end, as a user types the
// commands. Each script gets its own embedded nats-server in $NATS_URL.
// UPDATE_SCRIPTS=1 go test -run TestScripts . rewrites the expected output.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: os.Getenv("UPDATE_SCRIPTS") != "",
		Setup: func(env *testscript.Env) error {
			srv := natstest.Start(env.T().(testing.TB))
			env.Setenv("NATS_URL", srv.URL())
			env.Setenv("NO_COLOR", "1")
			return nil
		},
	})
}
