//go:build !linux

package work

import "time"

type clock struct{}

func newClock() *clock                 { return &clock{} }
func (c *clock) sleep(d time.Duration) { time.Sleep(d) }
