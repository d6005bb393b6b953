package commands

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// typedArgsKey holds, in the app's metadata, the command line as typed.
const typedArgsKey = "args"

// typedCommand is the running command as the user typed it: "lanes", the
// command name and everything after it. Hints that suggest the next
// command start from it, so they keep the user's own flags.
func typedCommand(c *cli.Context) []string {
	args, _ := c.App.Metadata[typedArgsKey].([]string)
	for i, a := range args {
		if i > 0 && a == c.Command.Name {
			return append([]string{"lanes"}, args[i:]...)
		}
	}
	return []string{"lanes", c.Command.Name}
}

// shellLine writes args as one shell command line, quoting what the shell
// would otherwise split or expand.
func shellLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
