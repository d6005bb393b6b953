//go:build !linux

package clock

import "time"

// Clock is time.Sleep where Linux's timerfd is not available.
type Clock struct{}

// New makes a clock.
func New() *Clock { return &Clock{} }

// Sleep waits d.
func (c *Clock) Sleep(d time.Duration) { time.Sleep(d) }

// Close does nothing.
func (c *Clock) Close() {}
