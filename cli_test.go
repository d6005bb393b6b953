package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestCLIScripts runs testdata/cli/*.txtar: the command-line conventions
// (help, version, completion, man page, flag errors) as a user meets them.
// No server. $REPO is the module root, for scripts that build the binary.
// UPDATE_SCRIPTS=1 go test -run TestCLIScripts . rewrites their expected output.
func TestCLIScripts(t *testing.T) {
	repo, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goEnv := goCaches()
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/cli",
		UpdateScripts: os.Getenv("UPDATE_SCRIPTS") != "",
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
			for k, v := range goEnv {
				env.Setenv(k, v)
			}
			return nil
		},
	})
}

// goCaches are the go command's caches: scripts run with HOME=/no-home,
// where a go build would start from an empty cache.
func goCaches() map[string]string {
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
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
