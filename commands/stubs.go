package commands

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"
)

// Placeholders replaced by the apply, inspect and simulate work.

func applyCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "apply", Usage: "converge a server to the plan (not built yet)",
		Action: func(*cli.Context) error { return errors.New("apply is not built yet") }}
}

func simulateCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "simulate", Usage: "predict and prove a design (not built yet)",
		Action: func(*cli.Context) error { return errors.New("simulate is not built yet") }}
}

func runPlanDiff(ctx context.Context, o PlanOptions) error {
	return errors.New("plan --server is not built yet")
}
