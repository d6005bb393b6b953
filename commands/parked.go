package commands

import "github.com/urfave/cli/v2"

// parkedCommand is being built (issue 19).
func parkedCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "parked", Hidden: true, Action: func(c *cli.Context) error { return usageErrorf("lanes parked is not built yet") }}
}
