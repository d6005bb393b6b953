package commands

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/sim/strategy"
)

// completeCommand is the hidden command the completion scripts call with
// the words typed so far (the last one is the word being completed). It
// prints one candidate per line; none lets the shell complete file names.
const completeCommand = "__complete"

func completionCommand(io *IO) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		UsageText: "lanes completion bash|zsh|fish",
		Description: `Completes commands, flags, output formats and other fixed values, natscli
context names, and stream names when a server is named (--server, NATS_URL or
--context; one quick request).

Install:
   bash:  echo 'source <(lanes completion bash)' >> ~/.bashrc
   zsh:   lanes completion zsh > "${fpath[1]}/_lanes"     (then restart the shell)
   fish:  lanes completion fish > ~/.config/fish/completions/lanes.fish`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageErrorf("completion takes one shell: bash, zsh or fish")
			}
			script, ok := completionScripts[c.Args().First()]
			if !ok {
				return usageErrorf("completion %q: choose bash, zsh or fish", c.Args().First())
			}
			_, err := fmt.Fprint(io.Out, script)
			return err
		},
	}
}

func hiddenCompleteCommand(io *IO) *cli.Command {
	return &cli.Command{
		Name:            completeCommand,
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			for _, s := range complete(c.Context, c.App, c.Args().Slice()) {
				fmt.Fprintln(io.Out, s)
			}
			return nil
		},
	}
}

// complete returns the candidates for the last of words (the command line
// after "lanes").
func complete(ctx context.Context, app *cli.App, words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	cur, before := words[len(words)-1], words[:len(words)-1]
	var cmd *cli.Command
	for _, w := range before {
		if !strings.HasPrefix(w, "-") {
			cmd = findCommand(app, w)
			break
		}
	}
	if cmd == nil {
		if strings.HasPrefix(cur, "-") {
			return withPrefix(cur, []string{"--help", "--version"})
		}
		var names []string
		for _, c := range app.Commands {
			if !c.Hidden {
				names = append(names, c.Name)
			}
		}
		return withPrefix(cur, names)
	}
	if cmd.Name == "help" {
		return complete(ctx, app, []string{cur})
	}
	if name, _, ok := strings.Cut(cur, "="); ok && strings.HasPrefix(name, "--") {
		var out []string
		for _, v := range flagValues(ctx, cmd, strings.TrimLeft(name, "-"), before) {
			out = append(out, name+"="+v)
		}
		return withPrefix(cur, out)
	}
	if len(before) > 0 {
		if prev := before[len(before)-1]; strings.HasPrefix(prev, "-") && takesValue(cmd, strings.TrimLeft(prev, "-")) {
			return withPrefix(cur, flagValues(ctx, cmd, strings.TrimLeft(prev, "-"), before))
		}
	}
	if strings.HasPrefix(cur, "-") {
		var names []string
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				if len(n) > 1 {
					names = append(names, "--"+n)
				}
			}
		}
		names = append(names, "--help")
		return withPrefix(cur, names)
	}
	if cmd.Name == "completion" {
		return withPrefix(cur, []string{"bash", "zsh", "fish"})
	}
	return nil
}

func findCommand(app *cli.App, name string) *cli.Command {
	for _, c := range app.Commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the command's flag of this name needs a value.
func takesValue(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			dv, ok := f.(cli.DocGenerationFlag)
			if _, isBool := f.(*cli.BoolFlag); isBool {
				return false
			}
			return ok && dv.TakesValue()
		}
	}
	return false
}

// flagValues are the fixed values of a flag, or live ones where cheap.
func flagValues(ctx context.Context, cmd *cli.Command, flag string, words []string) []string {
	switch flag {
	case "output", "o":
		return commandFormats[cmd.Name]
	case "mapping":
		return []string{"stream", "account"}
	case "storage":
		return []string{"file", "memory"}
	case "retention":
		return []string{"limits", "workqueue", "interest"}
	case "strategy":
		return strategy.Names()
	case "context":
		return natsContexts()
	case "stream":
		return liveStreams(ctx, words)
	}
	return nil
}

// commandFormats are the -o values of each command.
var commandFormats = map[string][]string{
	"plan":     planFormats,
	"apply":    applyFormats,
	"inspect":  inspectFormats,
	"simulate": simulateFormats,
}

func withPrefix(prefix string, candidates []string) []string {
	var out []string
	for _, c := range candidates {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// natsContexts lists natscli's context names.
func natsContexts() []string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		dir = filepath.Join(home, ".config")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "nats", "context", "*.json"))
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	return out
}

// liveStreams lists the streams of the server named on the command line
// or in NATS_URL / --context, with a short deadline: completion must not
// hang on an unreachable server.
func liveStreams(ctx context.Context, words []string) []string {
	o := connect.Options{Server: os.Getenv("NATS_URL"), Context: os.Getenv("NATS_CONTEXT"), Timeout: time.Second, ConfigHome: os.Getenv("XDG_CONFIG_HOME")}
	for i, w := range words {
		name, value, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if !hasValue && i+1 < len(words) {
			value = words[i+1]
		}
		switch {
		case !strings.HasPrefix(w, "-"):
		case name == "server" || name == "s":
			o.Server = value
		case name == "context":
			o.Context = value
		}
	}
	if !o.Given() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := connect.Open(ctx, o)
	if err != nil {
		return nil
	}
	defer conn.Close()
	var out []string
	names := conn.JS.StreamNames(ctx)
	for n := range names.Name() {
		out = append(out, n)
	}
	return out
}

var completionScripts = map[string]string{
	"bash": `# bash completion for lanes: source <(lanes completion bash)
_lanes_complete() {
  local cur words
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:1:COMP_CWORD}")
  local IFS=$'\n'
  COMPREPLY=($(lanes ` + completeCommand + ` "${words[@]}" 2>/dev/null))
  if [[ ${#COMPREPLY[@]} -eq 0 ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _lanes_complete lanes
`,
	"zsh": `#compdef lanes
# zsh completion for lanes: lanes completion zsh > "${fpath[1]}/_lanes"
_lanes() {
  local -a candidates
  candidates=("${(@f)$(lanes ` + completeCommand + ` "${(@)words[2,CURRENT]}" 2>/dev/null)}")
  if [[ -n "${candidates[1]}" ]]; then
    compadd -Q -- "${candidates[@]}"
  else
    _files
  fi
}
if [[ "$funcstack[1]" = "_lanes" ]]; then
  _lanes "$@"
else
  compdef _lanes lanes
fi
`,
	"fish": `# fish completion for lanes: lanes completion fish > ~/.config/fish/completions/lanes.fish
function __lanes_complete
    set -l words (commandline -opc)[2..-1] (commandline -ct)
    lanes ` + completeCommand + ` $words 2>/dev/null
end
complete -c lanes -f -n 'test -n "$(__lanes_complete)"' -a '(__lanes_complete)'
complete -c lanes -F -n 'test -z "$(__lanes_complete)"'
`,
}
