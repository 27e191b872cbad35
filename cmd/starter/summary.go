package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// writeSummary prints the summary of a set: the overall lines, then one
// line per environment.
func writeSummary(w io.Writer, set string, s trainer.SetSummary) error {
	if err := writeOverall(w, set, s.Overall); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeEnvTable(w, s.ByEnv)
}

// writeEnvTable prints one line per environment and how "passed" is counted.
func writeEnvTable(w io.Writer, rows []trainer.EnvSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENV\tROLLOUTS\tCOMPLETED\tFAILED\tRUNNING\tQUEUED\tPASSED\tMEAN REWARD\tMEAN TURNS")
	var dense []string
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.4f\t%.2f\n",
			r.Env, r.Rollouts, r.Completed, r.Failed, r.Running, r.Queued, r.Passed, r.MeanReward, r.MeanTurns)
		if e, ok := catalog.Lookup(r.Env); ok && e.DenseReward {
			dense = append(dense, r.Env)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rule := "passed: completed with reward >= 1"
	if len(dense) > 0 {
		rule += "; " + strings.Join(dense, ", ") + " (summed step rewards): reward > 0"
	}
	_, err := fmt.Fprintln(w, rule)
	return err
}

// writeOverall prints s as a small aligned table.
func writeOverall(w io.Writer, set string, s trainer.Summary) error {
	return writeTable(w, [][2]string{
		{"set", set},
		{"rollouts", fmt.Sprint(s.Rollouts)},
		{"completed", fmt.Sprint(s.Completed)},
		{"failed", fmt.Sprint(s.Failed)},
		{"running", fmt.Sprint(s.Running)},
		{"queued", fmt.Sprint(s.Queued)},
		{"mean reward", fmt.Sprintf("%.4f", s.MeanReward)},
		{"mean turns", fmt.Sprintf("%.2f", s.MeanTurns)},
		{"p50 rollout time", roundDuration(s.P50).String()},
		{"p95 rollout time", roundDuration(s.P95).String()},
	})
}

// roundDuration keeps three significant places for a reader.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	default:
		return d
	}
}

func newSummaryCmd(g *globals) *cobra.Command {
	var set string
	cmd := &cobra.Command{
		Use:   "summary",
		Short: "Completed, failed, running, queued, mean reward and turns, p50/p95 rollout time of a set, overall and per environment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				sum, err := c.Summary(cmd.Context(), set)
				if err != nil {
					return err
				}
				if sum.Overall.Rollouts == 0 {
					return fmt.Errorf("set %q has no rollouts in visibility", set)
				}
				return g.emit(cmd.OutOrStdout(), struct {
					Set string `json:"set"`
					trainer.SetSummary
				}{set, sum}, func(w io.Writer) error { return writeSummary(w, set, sum) })
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
