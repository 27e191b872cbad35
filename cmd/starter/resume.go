package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
)

func newResumeCmd(g *globals) *cobra.Command {
	var (
		req trainer.ResumeRequest
	)
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Release a checkpoint taken with --stay-paused: environment servers first, then the set's rollouts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := req.Validate(); err != nil {
				return err
			}
			tok, err := trainer.ControlToken(os.LookupEnv)
			if err != nil {
				return err
			}
			req.ControlToken = tok
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				sum, err := c.Resume(cmd.Context(), req)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), struct {
					Set          string `json:"set"`
					CheckpointID string `json:"checkpoint_id"`
					trainer.ResumeSummary
				}{req.Set, req.CheckpointID, sum}, func(w io.Writer) error { return writeResumeSummary(w, req.Set, req.CheckpointID, sum) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "the set whose rollouts to release")
	f.StringVar(&req.CheckpointID, "id", "", "the checkpoint id they are held for")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated")
	for _, name := range []string{"set", "id", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func writeResumeSummary(w io.Writer, set, id string, s trainer.ResumeSummary) error {
	_, err := fmt.Fprintf(w, "resumed checkpoint %s of set %s: %d environment servers, %d rollouts (%d had closed already)\n",
		id, set, s.Participants, s.Rollouts, s.Closed)
	return err
}
