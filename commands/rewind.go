package commands

import "github.com/urfave/cli/v2"

// rewindCommand is being built (issue 19).
func rewindCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "rewind", Hidden: true, Action: func(c *cli.Context) error { return usageErrorf("lanes rewind is not built yet") }}
}
