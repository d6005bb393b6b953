package clock

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Clock is one goroutine's timer; it is not safe for concurrent use.
type Clock struct {
	fd int
	f  *os.File
}

// New makes a clock; without a timerfd it falls back to time.Sleep.
func New() *Clock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return &Clock{fd: -1}
	}
	return &Clock{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}
}

// Sleep waits d. Callers that must notice a cancellation sleep in slices.
func (c *Clock) Sleep(d time.Duration) {
	if c.f == nil {
		time.Sleep(d)
		return
	}
	// A zero it_value disarms the timer, and the read would never return.
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

// Close releases the timerfd.
func (c *Clock) Close() {
	if c.f != nil {
		c.f.Close()
	}
}
