package work

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// clock sleeps through a timerfd read by the runtime's poller: Go timers
// can fire up to a millisecond late when the process is otherwise idle,
// which would distort a benchmark of 1 ms handlers (see sim/live).
type clock struct {
	fd int
	f  *os.File
}

func newClock() *clock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &clock{}
	}
	return &clock{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

func (c *clock) sleep(d time.Duration) {
	if c.f == nil {
		time.Sleep(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if unix.TimerfdSettime(c.fd, 0, &spec, nil) != nil {
		time.Sleep(d)
		return
	}
	var b [8]byte
	c.f.Read(b[:])
}
