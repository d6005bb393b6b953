package actions

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// errNotATime is ParseSince's answer to what is no time at all.
var errNotATime = errors.New("not a time: write 2026-12-02T13:55:00Z (RFC 3339), 13:55 (today, local) or 15m (ago)")

// ParseSince reads a time in the past as lanes rewind --to-time and lanes
// top take it: RFC 3339, a clock time today in local time (13:55,
// 13:55:05), or a duration ago (15m, 2h, "15m ago").
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		for _, layout := range []string{"15:04", "15:04:05"} {
			if c, cerr := time.ParseInLocation(layout, s, now.Location()); cerr == nil {
				t, err = time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), 0, now.Location()), nil
				break
			}
		}
	}
	if err != nil {
		d, derr := time.ParseDuration(strings.TrimSpace(strings.TrimSuffix(s, "ago")))
		if derr != nil || d <= 0 {
			return time.Time{}, errNotATime
		}
		t = now.Add(-d)
	}
	if t.After(now) {
		return t, fmt.Errorf("%s is in the future", t.Format(time.RFC3339))
	}
	return t, nil
}
