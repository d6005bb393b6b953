// Package figure writes a simulation's figures for people, the same way
// in the tables (render) and in the verdicts (sim/strategy, sim/model): a
// rate, a latency, a share, a counted noun.
package figure

import "fmt"

// Rate is a rate per second: 286/s, 42.0/s, 3.50/s.
func Rate(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f/s", v)
	case v >= 10:
		return fmt.Sprintf("%.1f/s", v)
	}
	return fmt.Sprintf("%.2f/s", v)
}

// Millis is a duration given in milliseconds: 1.67s, 41.5ms, 2.00ms.
func Millis(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.2fms", v)
}

// Share is a fraction as a whole percentage: 0.35 is 35%.
func Share(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }

// Plural is one for a count of 1, else many: "1 lane", "3 lanes".
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
