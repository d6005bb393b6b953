package input

import (
	"os"

	"golang.org/x/sys/unix"
)

// openTmpfile opens an unnamed file in dir (O_TMPFILE).
func openTmpfile(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDWR|unix.O_TMPFILE, 0o600)
}
