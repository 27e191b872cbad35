package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// writeRecoverResult prints res as an aligned two-column table.
func writeRecoverResult(w io.Writer, res checkpoint.RecoverServerResult) error {
	return writeTable(w, [][2]string{
		{"checkpoint", orDash(res.CheckpointID)},
		{"restore id", orDash(res.RestoreID)},
		{"participant", fmt.Sprint(res.Participant)},
		{"moved", fmt.Sprint(res.Affected)},
		{"continue", fmt.Sprint(res.Continue)},
		{"started_over", fmt.Sprint(res.StartOver)},
		{"terminated", fmt.Sprint(res.Terminated)},
		{"untouched", fmt.Sprint(res.Untouched)},
	})
}

func newRecoverCmd(g *globals) *cobra.Command {
	var (
		req  trainer.RecoverServerRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Move the rollouts of a dead environment server to a replacement (RecoverServer workflow)",
		Long: "Start the RecoverServer workflow: the rollouts of the set whose sessions lived on --server go back to\n" +
			"their boundary in the checkpoint (or start over from their seed) as a new attempt on --replacement,\n" +
			"a fresh server started with the dead one's --name; every other rollout runs on untouched.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				started, err := c.RecoverServer(cmd.Context(), req)
				if err != nil {
					return err
				}
				if !wait {
					return g.emit(cmd.OutOrStdout(), started, func(io.Writer) error { return nil })
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "recovery %s (run %s) started; waiting\n", started.WorkflowID, started.RunID)
				res, err := c.WaitRecoverServer(cmd.Context(), started)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), res, func(w io.Writer) error { return writeRecoverResult(w, res) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "set whose rollouts the dead server held")
	f.StringVar(&req.Server, "server", "", "base URL of the dead environment server")
	f.StringVar(&req.Replacement, "replacement", "", "base URL of its replacement (started with the same --name)")
	f.StringVar(&req.Checkpoint, "checkpoint", "", "checkpoint id to go back to (default: the newest committed one of the set)")
	f.StringVar(&req.Root, "root", "", "directory the checkpoints are under (made absolute), or a storage URL")
	f.StringVar(&req.RequestID, "request-id", "", "name of this recovery (default: derived from --server)")
	f.BoolVar(&wait, "wait", false, "wait for the recovery and print its result")
	for _, name := range []string{"set", "server", "replacement", "root"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
