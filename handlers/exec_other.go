//go:build !unix

package handlers

import (
	"os"
	"os/exec"
)

// groups: no process groups here.
type groups struct{}

// start starts a command made by build (sh -c Command). Without process
// groups, the context's end kills the shell only, and nothing ties the
// handler's life to the worker's: a handler can outlive a worker that is
// killed.
func (h *Exec) start(build func() *exec.Cmd) (cmd *exec.Cmd, done func(), err error) {
	cmd = build()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, func() {}, nil
}

// checkFile cannot tell here whether f can be written.
func checkFile(*os.File) error { return nil }
