package commands

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/jsapi"
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
	var args []string // the words after the command's name
	for i, w := range before {
		if !strings.HasPrefix(w, "-") {
			cmd, args = findCommand(app, w), before[i+1:]
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
		for _, v := range flagValues(ctx, app, cmd, strings.TrimLeft(name, "-"), args) {
			out = append(out, name+"="+v)
		}
		return withPrefix(cur, out)
	}
	if len(before) > 0 {
		if prev := before[len(before)-1]; strings.HasPrefix(prev, "-") && takesValue(cmd, strings.TrimLeft(prev, "-")) {
			return withPrefix(cur, flagValues(ctx, app, cmd, strings.TrimLeft(prev, "-"), args))
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

// flagValues are the values of a flag: natscli's contexts, a server's
// streams, or the fixed ones its definition carries. args are the words
// typed after the command's name.
func flagValues(ctx context.Context, app *cli.App, cmd *cli.Command, name string, args []string) []string {
	switch name {
	case "context":
		return natsContexts()
	case "stream":
		return liveStreams(ctx, app, cmd, args)
	}
	return flagChoices(cmd, name)
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

// liveStreams lists the streams of the server that args (the command's
// words so far) name with the connection flags, or NATS_URL and
// NATS_CONTEXT (for every command, plan's too), with a short deadline:
// completion must not hang on an unreachable server.
func liveStreams(ctx context.Context, app *cli.App, cmd *cli.Command, args []string) []string {
	o := connectOptions(typedFlags(app, cmd, args))
	if !o.Given() {
		return nil
	}
	o.Timeout = time.Second
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := connect.Open(ctx, o)
	if err != nil {
		return nil
	}
	defer conn.Close()
	names, _ := jsapi.New(conn).StreamNames(ctx, "")
	return names
}

// typedFlags parses args, the words typed after the command's name, with
// the command's own flags, as the command will parse them, but with the
// connection flags that read the environment. A flag still waiting for
// its value, or one the command does not know, ends the parse: the flags
// before it count.
func typedFlags(app *cli.App, cmd *cli.Command, args []string) *cli.Context {
	set := flag.NewFlagSet(cmd.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	flags := connectFlags()
	for _, f := range cmd.Flags {
		if !slices.ContainsFunc(flags, func(c cli.Flag) bool { return c.Names()[0] == f.Names()[0] }) {
			flags = append(flags, f)
		}
	}
	for _, f := range flags {
		f.Apply(set)
	}
	set.Parse(args)
	// Each alias is a flag of its own here: what was typed as -s is
	// --server's value, as urfave/cli makes it after its parse.
	set.Visit(func(typed *flag.Flag) {
		for _, f := range flags {
			if names := f.Names(); names[0] != typed.Name && slices.Contains(names, typed.Name) {
				set.Set(names[0], typed.Value.String())
			}
		}
	})
	return cli.NewContext(app, set, nil)
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
