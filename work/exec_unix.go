//go:build unix

package work

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// lifelineScript runs a handler's command (its first argument) so that it
// cannot outlive the worker. The worker gives it, as fd 3, the read end of
// a pipe (the lifeline) whose write end only the worker holds. The shell,
// the leader of the handler's own process group, first starts a watcher
// that reads the lifeline: a line means the handler is done and the
// watcher exits; end of file means the worker is gone, however it ended
// (the kernel closes a dead process's files, on SIGKILL too), and the
// watcher kills the whole process group: the shell, the command and what
// it started. The command then runs in a subshell, without fd 3 and
// without the watcher among its children (its own wait and exec behave as
// under sh -c), with no positional parameters, as under sh -c.
const lifelineScript = `{ read -r line <&3 || kill -KILL 0; } </dev/null >/dev/null 2>&1 &
exec 3<&-
(lanes_command=$1; set --; eval "unset lanes_command;$lanes_command")
exit $?`

// handlerCommand runs `shell -c command` in its own process group, tied
// to the worker's life by a lifeline (see lifelineScript); the context's
// end kills the whole group. started must be called once the command has
// started (or failed to), and done once it has exited.
func handlerCommand(ctx context.Context, shell, command string) (cmd *exec.Cmd, started, done func(), err error) {
	r, w, err := os.Pipe() // both ends close on exec: only the handler's fd 3 stays open
	if err != nil {
		return nil, nil, nil, err
	}
	cmd = exec.CommandContext(ctx, shell, "-c", lifelineScript, shell, command)
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	started = func() { r.Close() }
	done = func() {
		_, _ = w.Write([]byte("\n")) // the watcher exits; it may be gone already (killed with the group)
		w.Close()
	}
	return cmd, started, done, nil
}

// checkFile polls f for writing without waiting: a pipe or socket whose
// reader is gone reports an error, a terminal that hung up a hang-up.
func checkFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var revents int
	_ = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		if n, err := unix.Poll(p, 0); err == nil && n == 1 {
			revents = int(p[0].Revents)
		}
	})
	switch {
	case revents&unix.POLLERR != 0:
		return fmt.Errorf("lanes work's %s is closed (a broken pipe: its reader is gone)", outputName(f))
	case revents&unix.POLLHUP != 0:
		return fmt.Errorf("lanes work's %s hung up", outputName(f))
	case revents&unix.POLLNVAL != 0:
		return fmt.Errorf("lanes work's %s is not open", outputName(f))
	}
	return nil
}

func outputName(f *os.File) string {
	if f == os.Stdout {
		return "stdout"
	}
	return f.Name()
}
