//go:build unix

package work

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup puts the command in its own process group, and makes
// the context's end kill the whole group: sh and whatever it started.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
