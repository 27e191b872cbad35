package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// failedResult is the line of a rollout that closed without a result.
type failedResult struct {
	RolloutID string `json:"rollout_id"`
	Error     string `json:"error"`
}

// writeResults prints one JSON line per rollout with an outcome, in rollout
// id order: its RolloutResult with its receipt (closed, or held for
// acknowledgement), or {"rollout_id","error"}. It returns how many rollouts
// are still open without a result and were left out.
func writeResults(w io.Writer, recs []trainer.RolloutRecord) (open int, err error) {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		var line any
		switch {
		case r.Result != nil:
			line = r.Result
		case r.Closed():
			line = failedResult{RolloutID: r.RolloutID, Error: r.Err}
		default:
			open++
			continue
		}
		if err := enc.Encode(line); err != nil {
			return open, fmt.Errorf("write result of %s: %w", r.RolloutID, err)
		}
	}
	return open, nil
}

func newResultsCmd(g *globals) *cobra.Command {
	var set string
	cmd := &cobra.Command{
		Use:   "results",
		Short: "Print one JSON line per finished rollout of a set (its result with its receipt, or its error)",
		Long: "Print one JSON line per rollout that completed (its result, with the receipt to acknowledge it by),\n" +
			"holds its result for acknowledgement, or failed ({\"rollout_id\",\"error\"}). The output feeds\n" +
			"`starter acknowledge --receipts`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				recs, err := c.Results(cmd.Context(), set)
				if err != nil {
					return err
				}
				open, err := writeResults(cmd.OutOrStdout(), recs)
				if err != nil {
					return err
				}
				if open > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "%d rollouts of set %s are still running and not listed\n", open, set)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
