package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// writeRestoreResult prints res as an aligned two-column table.
func writeRestoreResult(w io.Writer, res checkpoint.RestoreResult) error {
	return writeTable(w, [][2]string{
		{"checkpoint", orDash(res.CheckpointID)},
		{"restored", fmt.Sprint(res.Restored)},
		{"started_over", fmt.Sprint(res.StartedOver)},
		{"offered_again", fmt.Sprint(res.OfferedAgain)},
		{"started", fmt.Sprint(res.Started)},
		{"terminated", fmt.Sprint(res.Terminated)},
		{"attempts digest", orDash(res.AttemptsDigest)},
	})
}

func newRestoreCmd(g *globals) *cobra.Command {
	var (
		req  trainer.RestoreRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a committed checkpoint as new attempts (Restore workflow)",
		Long: "Start the Restore workflow: validate the whole checkpoint under <root>/<id>/, install the environment\n" +
			"servers as the new attempts, start every unfinished rollout from its boundary, then resume.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				var started trainer.Started
				c.OnStart = announce(cmd.ErrOrStderr(), &started)
				res, err := c.Restore(cmd.Context(), req, wait)
				if err != nil {
					return err
				}
				if res == nil {
					return g.emit(cmd.OutOrStdout(), started, func(io.Writer) error { return nil })
				}
				return g.emit(cmd.OutOrStdout(), res, func(w io.Writer) error { return writeRestoreResult(w, *res) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.CheckpointID, "id", "", "checkpoint id to restore")
	f.StringVar(&req.RestoreID, "restore-id", "", "name of this restore (default: the checkpoint id); restoring the same checkpoint again takes a new one")
	f.StringVar(&req.Root, "root", "", "directory the checkpoint is under (made absolute), or a storage URL")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated, in the order they had at checkpoint time")
	f.BoolVar(&wait, "wait", false, "wait for the restore and print its result")
	for _, name := range []string{"id", "root", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
