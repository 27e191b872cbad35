package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func newAdmissionCmd(g *globals) *cobra.Command {
	var (
		set string
		n   int
	)
	cmd := &cobra.Command{
		Use:   "admission",
		Short: "Show a set's admission (running, queued, max_in_flight); with --max-in-flight, change it while the set runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				var st trainer.AdmissionStatus
				var err error
				if cmd.Flags().Changed("max-in-flight") {
					st, err = c.SetMaxInFlight(cmd.Context(), set, n)
				} else {
					var ok bool
					st, ok, err = c.Admission(cmd.Context(), set)
					if err == nil && !ok {
						err = fmt.Errorf("set %q has no admission (not submitted, or submitted before sets had one)", set)
					}
				}
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), st, func(w io.Writer) error { return writeAdmission(w, st) })
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	cmd.Flags().IntVar(&n, "max-in-flight", 0, "new max_in_flight: a raise starts queued rollouts at once, a cut lets the running ones finish")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}

// writeAdmission prints where a set's admission stands.
func writeAdmission(w io.Writer, st trainer.AdmissionStatus) error {
	rows := [][2]string{
		{"set", st.Set},
		{"max in flight", fmt.Sprint(st.MaxInFlight)},
		{"running", fmt.Sprint(st.Running)},
		{"queued", fmt.Sprint(st.Queued)},
		{"admitted", fmt.Sprint(st.Counts.Admitted)},
		{"finished", fmt.Sprint(st.Counts.Finished)},
		{"not started", fmt.Sprint(st.Counts.NotStarted)},
		{"batches received", fmt.Sprintf("%d of %d", st.Received, st.Batches)},
	}
	if st.Hold != "" {
		rows = append(rows, [2]string{"held for checkpoint", st.Hold})
	}
	return writeTable(w, rows)
}
