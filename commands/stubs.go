package commands

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"
)

// Placeholders replaced by the apply and inspect work.

func applyCommand(io *IO) *cli.Command {
	return &cli.Command{Name: "apply", Usage: "converge a server to the plan (not built yet)",
		Action: func(*cli.Context) error { return errors.New("apply is not built yet") }}
}

func runPlanDiff(ctx context.Context, o PlanOptions) error {
	return errors.New("plan --server is not built yet")
}
