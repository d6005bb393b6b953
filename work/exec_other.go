//go:build !unix

package work

import "os/exec"

// ownProcessGroup: without process groups, the context's end kills the
// shell only.
func ownProcessGroup(*exec.Cmd) {}
