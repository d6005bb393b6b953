package clock

import (
	"testing"
	"time"
)

// A sleep lasts at least its duration and wakes soon after; a zero or
// negative duration returns at once instead of blocking forever.
func TestSleepWakesOnTime(t *testing.T) {
	c := New()
	defer c.Close()
	for _, d := range []time.Duration{0, -time.Millisecond, time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		c.Sleep(d)
		took := time.Since(start)
		if took < d {
			t.Errorf("Sleep(%s) returned after %s", d, took)
		}
		if took > d+100*time.Millisecond { // generous: a loaded machine
			t.Errorf("Sleep(%s) took %s", d, took)
		}
	}
}
