package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// failedResult is the line of a rollout that closed without a result.
type failedResult struct {
	RolloutID string `json:"rollout_id"`
	Error     string `json:"error"`
}

// writeResults prints one JSON line per closed rollout, in rollout id order:
// its RolloutResult, or {"rollout_id","error"}. It returns how many rollouts
// are still open and were left out.
func writeResults(w io.Writer, recs []RolloutRecord) (open int, err error) {
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
		Short: "Print one JSON line per closed rollout of a set (its result, or its error)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateSet(set); err != nil {
				return err
			}
			c, _, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			recs, err := collectSet(cmd.Context(), c, set, true)
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
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
