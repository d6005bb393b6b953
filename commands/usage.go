package commands

import (
	"regexp"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// Go's flag package words its errors with one dash ("flag provided but not
// defined: -partitionz"); users type two. These patterns catch its messages.
var (
	unknownFlagRe  = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	invalidValueRe = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
	needsArgRe     = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
)

// usageError rewrites a flag parsing error in the spelling users type,
// with a suggestion for a mistyped flag, and makes it exit 2.
func usageError(err error, flags []cli.Flag, help string) error {
	msg := err.Error()
	switch {
	case unknownFlagRe.MatchString(msg):
		name := unknownFlagRe.FindStringSubmatch(msg)[1]
		if s := closestFlag(flags, name); s != "" {
			return usageErrorf("unknown flag %s (did you mean %s?); see %s", dashed(name), dashed(s), help)
		}
		return usageErrorf("unknown flag %s; see %s", dashed(name), help)
	case invalidValueRe.MatchString(msg):
		m := invalidValueRe.FindStringSubmatch(msg)
		return usageErrorf("%s %q: %s; see %s", dashed(m[2]), m[1], expected(flags, m[2], m[3]), help)
	case needsArgRe.MatchString(msg):
		name := needsArgRe.FindStringSubmatch(msg)[1]
		return usageErrorf("%s needs a value; see %s", dashed(name), help)
	}
	return usageErrorf("%v; see %s", err, help)
}

// expected says what a flag takes, from its type; parse errors from the
// flag package name Go types, not what a user should write.
func expected(flags []cli.Flag, name, parseErr string) string {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
				return "not a whole number"
			case *cli.Float64Flag:
				return "not a number"
			case *cli.DurationFlag:
				return "not a duration (write 500ms, 30s or 2m)"
			case *cli.BoolFlag:
				return "write true or false"
			}
		}
	}
	return parseErr
}

// dashed writes a flag name as typed: -o, --output.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// closestFlag is the flag name nearest to a mistyped one, or "" when none
// is close enough to be a likely typo.
func closestFlag(flags []cli.Flag, typed string) string {
	var names []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) > 1 {
				names = append(names, n)
			}
		}
	}
	return closestName(names, typed)
}

// closestName is the name nearest to typed by Jaro-Winkler similarity,
// or "" below the similarity of a likely typo.
func closestName(names []string, typed string) string {
	best, bestScore := "", 0.0
	for _, n := range names {
		if score := smetrics.JaroWinkler(n, typed, 0.7, 4); score > bestScore {
			best, bestScore = n, score
		}
	}
	if bestScore < 0.85 {
		return ""
	}
	return best
}
