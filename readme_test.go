package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/rogpeppe/go-internal/txtar"
)

// TestREADMECommandsAreScripted keeps the README and the docs from
// drifting away from the binary: every lanes command in the sh blocks of
// README.md, CONTRIBUTING.md and docs/*.md is run, as written, by an
// end-to-end script (testdata/script, testdata/cli), which checks what the
// text says about it. Written as, after the one rewrite a reader does in
// their head: nats://prod:4222 is the script's server ($NATS_URL), and
// `go run .` is lanes.
func TestREADMECommandsAreScripted(t *testing.T) {
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
	total := 0
	for _, doc := range markdownFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		commands := readmeCommands(string(data))
		if doc == "README.md" && len(commands) < 10 {
			t.Fatalf("found %d lanes commands in the README's sh blocks: the extraction is broken", len(commands))
		}
		total += len(commands)
		for _, c := range commands {
			if !scripted[c.text] {
				t.Errorf("%s:%d: no end-to-end script runs `%s`\n\tadd `exec %s` to a script under testdata/script (see readme.txtar)", doc, c.line, c.text, c.text)
			}
		}
	}
	if total < 60 {
		t.Fatalf("found %d lanes commands in the docs' sh blocks: the extraction is broken", total)
	}
}

// markdownFiles are the documents whose commands and links are checked:
// the README, CONTRIBUTING.md and docs/*.md.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	if _, err := os.Stat("CONTRIBUTING.md"); err == nil {
		files = append(files, "CONTRIBUTING.md")
	}
	return append(files, docs...)
}

// TestREADMEFilesAreScripted: a file the docs write with a here-document
// in an sh block (cat > lanes.yaml <<'EOF' in the README's tour) is, byte
// for byte, a file of some end-to-end script, so the script that runs the
// commands after it runs them on what the reader wrote.
func TestREADMEFilesAreScripted(t *testing.T) {
	scripts, err := filepath.Glob("testdata/script/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var archives []*txtar.Archive
	for _, f := range scripts {
		a, err := txtar.ParseFile(f)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, a)
	}
	found := 0
	for _, doc := range markdownFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hereDocs(string(data)) {
			found++
			scripted := false
			for _, a := range archives {
				for _, f := range a.Files {
					if f.Name == h.name && bytes.Equal(f.Data, []byte(h.text)) {
						scripted = true
					}
				}
			}
			if !scripted {
				t.Errorf("%s:%d: no end-to-end script has the file %s as written here\n\tadd it, byte for byte, as `-- %s --` to the script that runs the commands after it", doc, h.line, h.name, h.name)
			}
		}
	}
	if found == 0 {
		t.Fatal("found no here-document in the docs' sh blocks (the README's tour writes lanes.yaml): the extraction is broken")
	}
}

type hereDoc struct {
	line       int
	name, text string
}

// hereDocs are the files written in the sh blocks of a markdown text with
// cat > FILE <<'EOF' ... EOF.
func hereDocs(md string) []hereDoc {
	var out []hereDoc
	var cur *hereDoc
	inSh := false
	for i, line := range strings.Split(md, "\n") {
		switch {
		case cur != nil:
			if line == "EOF" {
				out = append(out, *cur)
				cur = nil
			} else {
				cur.text += line + "\n"
			}
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh:
			if m := hereDocStart.FindStringSubmatch(line); m != nil {
				cur = &hereDoc{line: i + 1, name: m[1]}
			}
		}
	}
	return out
}

var hereDocStart = regexp.MustCompile(`^cat > (\S+) <<'EOF'$`)

// TestDocLinks: every relative link in the README, CONTRIBUTING.md and
// docs/*.md names a file that exists and, with a #fragment, a heading of
// that markdown file (GitHub's anchors).
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(data))
		return anchors[path]
	}
	checked := 0
	for _, doc := range markdownFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(data)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			file, frag, _ := strings.Cut(l.target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", doc, l.line, l.target)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s:%d: link to %s: %s has no heading with the anchor #%s", doc, l.line, l.target, path, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d relative links: the extraction is broken", checked)
	}
}

type docLink struct {
	line   int
	target string
}

// markdownLinks are the [text](target) links of a markdown text outside
// code blocks and code spans.
func markdownLinks(md string) []docLink {
	var out []docLink
	inCode := false
	for i, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range linkTarget.FindAllStringSubmatch(line, -1) {
			out = append(out, docLink{line: i + 1, target: m[1]})
		}
	}
	return out
}

var (
	codeSpan   = regexp.MustCompile("`[^`]*`")
	linkTarget = regexp.MustCompile(`\]\(([^()\s]+)\)`)
)

// headingAnchors are the anchors GitHub gives a markdown text's headings:
// lower case, letters, digits, - and _ kept, spaces as -, the rest
// dropped, and -1, -2 ... after repeats.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		for n := 1; out[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", b.String(), n)
		}
		out[anchor] = true
	}
	return out
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
