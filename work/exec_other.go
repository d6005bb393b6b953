//go:build !unix

package work

import (
	"context"
	"os"
	"os/exec"
)

// handlerCommand runs `shell -c command`. Without process groups, the
// context's end kills the shell only, and nothing ties the handler's life
// to the worker's: a handler can outlive a worker that is killed.
func handlerCommand(ctx context.Context, shell, command string) (cmd *exec.Cmd, started, done func(), err error) {
	nop := func() {}
	return exec.CommandContext(ctx, shell, "-c", command), nop, nop, nil
}

// checkFile cannot tell here whether f can be written.
func checkFile(*os.File) error { return nil }
