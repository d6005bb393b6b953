package commands

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// Placeholders replaced by the apply, inspect and simulate work.

func inspectCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "inspect", Usage: "per-lane health (not built yet)",
		Action: func(*cli.Context) error { return errors.New("inspect is not built yet") }}
}

func simulateCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "simulate", Usage: "predict and prove a design (not built yet)",
		Action: func(*cli.Context) error { return errors.New("simulate is not built yet") }}
}
