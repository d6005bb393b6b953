package live

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// clock stands for a worker's work time with a timerfd read through the
// runtime's poller: the kernel wakes the poller when the timer fires. A Go
// timer can fire up to a millisecond late when the process is otherwise
// idle (the poller waits in whole milliseconds), which would add most of a
// millisecond to every 1 ms job once several lanes' timers interleave.
type clock struct {
	fd int
	f  *os.File
}

func newClock() *clock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &clock{fd: -1}
	}
	return &clock{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

// sleep waits d (at most a few tens of milliseconds at a time: the caller
// checks for the end of the run between calls).
func (c *clock) sleep(d time.Duration) {
	if c.f == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	if err := unix.TimerfdSettime(c.fd, 0, &spec, nil); err != nil {
		time.Sleep(d)
		return
	}
	var expirations [8]byte
	if _, err := c.f.Read(expirations[:]); err != nil {
		time.Sleep(d)
	}
}

func (c *clock) close() {
	if c.f != nil {
		c.f.Close()
	}
}
