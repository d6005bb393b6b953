package commands

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// version is what `lanes version` and `lanes --version` print. A release
// build sets it with -ldflags (see .goreleaser.yaml); go build and go
// install leave "dev", and the module version and VCS revision come from
// the build information the Go toolchain embeds.
type version struct{ version, commit, date string }

var buildInfo = version{"dev", "none", "unknown"}

// SetVersion records what the release build injected into main.
func SetVersion(v, commit, date string) {
	buildInfo = version{v, commit, date}
}

// resolved fills what ldflags did not set from the embedded build info.
func (v version) resolved(info *debug.BuildInfo, ok bool) version {
	if !ok {
		return v
	}
	if v.version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v.version = info.Main.Version
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if v.commit == "none" && settings["vcs.revision"] != "" {
		v.commit = settings["vcs.revision"]
		if len(v.commit) > 12 {
			v.commit = v.commit[:12]
		}
		if settings["vcs.modified"] == "true" {
			v.commit += "-dirty"
		}
	}
	if v.date == "unknown" && settings["vcs.time"] != "" {
		v.date = settings["vcs.time"]
	}
	return v
}

func currentVersion() version { return buildInfo.resolved(debug.ReadBuildInfo()) }

func (v version) String() string {
	return fmt.Sprintf("lanes %s (commit %s, built %s)", v.version, v.commit, v.date)
}

func printVersion(w io.Writer) { fmt.Fprintln(w, currentVersion()) }

func versionCommand(io *IO) *cli.Command {
	return &cli.Command{
		Name:      "version",
		Usage:     "print the version, commit and build date",
		UsageText: "lanes version",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("version takes no arguments (got %q)", c.Args().First())
			}
			printVersion(io.Out)
			return nil
		},
	}
}

// shortVersion is the version alone, for the man page header.
func shortVersion() string { return strings.TrimPrefix(currentVersion().version, "v") }
