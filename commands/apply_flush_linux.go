package commands

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// drainPipe waits (at most limit) until the reader of a pipe on w has read
// everything written to it. With stdout piped (lanes apply | tee log) and
// the prompt on the terminal, the diff then reaches the reader before the
// question does: two streams to one screen have no order of their own.
func drainPipe(w io.Writer, limit time.Duration) {
	f, ok := w.(*os.File)
	if !ok {
		return
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ)
		if err != nil || n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
