package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMECommandsAreScripted keeps the README from drifting away from
// the binary: every lanes command in the README's sh blocks is run, as
// written, by an end-to-end script (testdata/script, testdata/cli), which
// checks what the README says about it. Written as, after the one
// rewrite a reader does in their head: nats://prod:4222 is the script's
// server ($NATS_URL), and `go run .` is lanes.
func TestREADMECommandsAreScripted(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	scripted := map[string]bool{}
	for _, glob := range []string{"testdata/script/*.txtar", "testdata/cli/*.txtar"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, cmd := range scriptCommands(string(data)) {
				scripted[cmd] = true
			}
		}
	}
	commands := readmeCommands(string(readme))
	if len(commands) < 30 {
		t.Fatalf("found %d lanes commands in the README's sh blocks: the extraction is broken", len(commands))
	}
	for _, c := range commands {
		if !scripted[c.text] {
			t.Errorf("README.md:%d: no end-to-end script runs `%s`\n\tadd `exec %s` to a script under testdata/script (see readme.txtar)", c.line, c.text, c.text)
		}
	}
}

type readmeCommand struct {
	line int
	text string
}

// readmeCommands are the lanes invocations in the sh blocks of a
// markdown text, normalised (see normalise).
func readmeCommands(md string) []readmeCommand {
	var out []readmeCommand
	inSh := false
	for i, line := range strings.Split(md, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		case !inSh:
			continue
		}
		line = strings.ReplaceAll(line, "go run . ", "lanes ")
		at := lanesCall.FindStringIndex(line)
		if at == nil {
			continue
		}
		call := cutShell(line[at[0]:])
		call = call[strings.Index(call, "lanes "):] // after the environment it sets
		if cmd := normalise(call); cmd != "" {
			out = append(out, readmeCommand{line: i + 1, text: cmd})
		}
	}
	return out
}

// lanesCall finds where lanes is run on a shell line: at its start, or
// after a shell operator or process substitution.
var lanesCall = regexp.MustCompile(`(?:^|[(;&|]\s*)(?:\w+=\S*\s+)*lanes\s`)

// cutShell drops what the shell does around the command: its comment,
// pipes, redirections, a following command and backgrounding.
func cutShell(s string) string {
	s = strings.TrimLeft(s, "(;&| \t")
	quoted := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted != 0:
			if c == quoted {
				quoted = 0
			}
		case c == '\'' || c == '"':
			quoted = c
		case c == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t'),
			c == '|', c == '>', c == '&', c == ')':
			return s[:i]
		}
	}
	return s
}

// normalise squeezes spaces, names the script's server for the README's
// example one, and drops the double quotes a shell needs around a
// variable (testscript expands one into one argument without them).
func normalise(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "nats://prod:4222", "$NATS_URL")
	return doubleQuotedVar.ReplaceAllString(s, "$1")
}

var doubleQuotedVar = regexp.MustCompile(`"(\$\w+)"`)

// scriptCommands are the lanes commands a testscript file runs, with
// their negation and backgrounding dropped, normalised.
func scriptCommands(script string) []string {
	var out []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "-- ") {
			break // the archive's files
		}
		m := scriptExec.FindStringSubmatch(line)
		if m != nil {
			out = append(out, normalise(m[1]))
		}
	}
	return out
}

var scriptExec = regexp.MustCompile(`^\s*(?:\[[^\]]*\]\s*)?!?\s*exec\s+(lanes\s.*?)(?:\s+&\w*&)?\s*$`)

func TestREADMECommandExtraction(t *testing.T) {
	md := "text\n```sh\n" +
		"go run . simulate --live      # a live simulation\n" +
		"source <(lanes completion bash)     # bash\n" +
		"lanes plan -f lanes.yaml -o json | jq '.lanes[].filter'\n" +
		"lanes work -f x.yaml --exec \"$handler\" &\n" +
		"lanes inspect --fail-on 'lag>5m'   # exit 6\n" +
		"lanes apply -s nats://prod:4222  --yes\n" +
		"LANES_FILE=deploy/lanes.yaml lanes apply --dry-run\n" +
		"nats pub x y\n" +
		"```\n" +
		"lanes plan outside a block\n"
	var got []string
	for _, c := range readmeCommands(md) {
		got = append(got, c.text)
	}
	want := []string{
		"lanes simulate --live",
		"lanes completion bash",
		"lanes plan -f lanes.yaml -o json",
		"lanes work -f x.yaml --exec $handler",
		"lanes inspect --fail-on 'lag>5m'",
		"lanes apply -s $NATS_URL --yes",
		"lanes apply --dry-run",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	script := "exec lanes plan  -f a.yaml\n! exec lanes apply --yes\nexec lanes work --exec $h &w&\n[exec:sh] exec lanes man\n-- a.yaml --\nexec lanes nope\n"
	if got := strings.Join(scriptCommands(script), "|"); got != "lanes plan -f a.yaml|lanes apply --yes|lanes work --exec $h|lanes man" {
		t.Errorf("script commands: %s", got)
	}
}
