//go:build !linux

package live

import "time"

// clock is time.Sleep where Linux's timerfd is not available.
type clock struct{}

func newClock() *clock                 { return &clock{} }
func (c *clock) sleep(d time.Duration) { time.Sleep(d) }
func (c *clock) close()                {}
