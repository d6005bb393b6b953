package commands

import (
	"context"
	"io"
)

// MainOnTerminal runs lanes ARGS (args[0] is the program name) as if
// stdin were a terminal, so apply asks before changing an existing
// stream: the chaos test keeps an operator waiting at the prompt.
func MainOnTerminal(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	streams := &IO{In: in, Out: out, Err: errw, InTTY: true}
	return exitCode(newApp(streams).RunContext(ctx, args))
}
