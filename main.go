// Command lanes designs, applies, inspects and simulates ordered consumers
// (keyed lanes) on NATS JetStream.
package main

import (
	"os"

	"github.com/lanes-dev/lanes/commands"
)

// Set by the release build: -ldflags "-X main.version=... -X main.commit=... -X main.date=...".
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

func main() {
	commands.SetVersion(version, commit, date)
	os.Exit(commands.Main(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
