package converge

import (
	"errors"
	"os"
	"syscall"
)

// pidNamespace identifies this process's pid namespace: a pid means the
// same process only within one namespace.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// processAlive reports whether a process exists (one of another user's
// counts as alive).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || !errors.Is(err, syscall.ESRCH)
}
