//go:build unix

package handlers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A handler runs in a process group whose leader is a keeper: a shell
// that ties the group's life to the worker's. The keeper reads fd 3, the
// read end of a pipe (its lifeline) whose write end only the worker holds
// (close-on-exec). A line means the group is no longer needed: it exits.
// End of file means the worker's process is gone, however it ended (the
// kernel closes a dead process's files, on SIGKILL too): it kills the
// whole group, the handler running in it and all that started. The
// handler itself is `sh -c Command` as ever, a child of the worker; a
// group serves one handler at a time and is kept for the next one, so a
// message costs no process more than before.
const keeperScript = `read -r line <&3 || kill -KILL 0`

// groupIdle is how long a process group waits unused before its keeper
// is stopped.
var groupIdle = time.Minute

// group is a process group that handlers run in, one at a time.
type group struct {
	pgid   int
	life   *os.File      // the write end of the keeper's lifeline
	gone   chan struct{} // closed once the keeper has exited
	killed atomic.Bool   // the group was killed (max process time, stop)
	used   time.Time
}

func (g *group) alive() bool {
	select {
	case <-g.gone:
		return false
	default:
		return !g.killed.Load()
	}
}

// stop ends the keeper without killing anything.
func (g *group) stop() {
	_, _ = g.life.Write([]byte("\n"))
	g.life.Close()
}

// groups are an Exec's process groups: as many as handlers run at
// once, the most recently used taken first, stopped after groupIdle.
type groups struct {
	mu    sync.Mutex
	free  []*group    // the least recently used first
	sweep *time.Timer // stops the groups unused for groupIdle; nil when none is kept
}

func (gs *groups) take(shell string) (*group, error) {
	gs.mu.Lock()
	for len(gs.free) > 0 {
		g := gs.free[len(gs.free)-1]
		gs.free = gs.free[:len(gs.free)-1]
		if g.alive() {
			gs.mu.Unlock()
			return g, nil
		}
		g.life.Close()
	}
	gs.mu.Unlock()
	return startGroup(shell)
}

func (gs *groups) put(g *group) {
	if !g.alive() {
		g.life.Close()
		return
	}
	g.used = time.Now()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.free = append(gs.free, g)
	if gs.sweep == nil {
		gs.sweep = time.AfterFunc(groupIdle, gs.stopIdle)
	}
}

// stopIdle stops the keepers of the groups unused for groupIdle, and
// comes back while groups are kept.
func (gs *groups) stopIdle() {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for len(gs.free) > 0 && time.Since(gs.free[0].used) >= groupIdle {
		gs.free[0].stop()
		gs.free = gs.free[1:]
	}
	gs.sweep = nil
	if len(gs.free) > 0 {
		gs.sweep = time.AfterFunc(groupIdle-time.Since(gs.free[0].used), gs.stopIdle)
	}
}

// startGroup starts a keeper, the leader of a new process group.
func startGroup(shell string) (*group, error) {
	r, w, err := os.Pipe() // both ends close on exec: only the keeper's fd 3 stays open
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(shell, "-c", keeperScript, "lanes-handler-group")
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	g := &group{pgid: cmd.Process.Pid, life: w, gone: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(g.gone)
	}()
	return g, nil
}

// start starts a command made by build (sh -c Command) in a process group
// tied to the worker's life (see keeperScript); the context's end kills
// the whole group. done must be called once the command has exited.
func (h *Exec) start(build func() *exec.Cmd) (cmd *exec.Cmd, done func(), err error) {
	for try := 1; ; try++ {
		g, err := h.groups.take(h.Shell)
		if err != nil {
			return nil, nil, err
		}
		cmd = build()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: g.pgid}
		cmd.Cancel = func() error {
			g.killed.Store(true)
			return syscall.Kill(-g.pgid, syscall.SIGKILL)
		}
		err = cmd.Start()
		if err == nil {
			return cmd, func() { h.groups.put(g) }, nil
		}
		// The group may have ended meanwhile (its keeper killed): joining
		// it fails; a new group is started once.
		g.killed.Store(true)
		h.groups.put(g)
		if try > 1 || !(errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ESRCH)) {
			return nil, nil, err
		}
	}
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
