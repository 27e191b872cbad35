package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
)

// Summary condenses a set.
type Summary struct {
	Rollouts  int
	Completed int
	Failed    int // closed any way but completed: failed, terminated, timed out, canceled
	Running   int
	// Means over completed rollouts whose result was read.
	MeanReward float64
	MeanTurns  float64
	// Rollout time of the latest run (close − start), over completed rollouts.
	P50, P95 time.Duration
}

// Summarize condenses the latest runs of a set.
func Summarize(recs []RolloutRecord) Summary {
	var (
		s              Summary
		reward, turns  float64
		withResult     int
		completedTimes []time.Duration
	)
	s.Rollouts = len(recs)
	for _, r := range recs {
		switch {
		case r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			s.Completed++
			if !r.Close.IsZero() && !r.Start.IsZero() {
				completedTimes = append(completedTimes, r.Close.Sub(r.Start))
			}
			if r.Result != nil {
				withResult++
				reward += r.Result.Reward
				turns += float64(r.Result.Turns)
			}
		case r.Closed():
			s.Failed++
		default:
			s.Running++
		}
	}
	if withResult > 0 {
		s.MeanReward = reward / float64(withResult)
		s.MeanTurns = turns / float64(withResult)
	}
	s.P50 = Percentile(completedTimes, 50)
	s.P95 = Percentile(completedTimes, 95)
	return s
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It is always one of the values; 0 for none. ds is not changed.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	// p*n/100 rather than p/100*n: 95*20/100 is exactly 19.
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// writeSummary prints s as a small aligned table.
func writeSummary(w io.Writer, set string, s Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"set", set},
		{"rollouts", fmt.Sprint(s.Rollouts)},
		{"completed", fmt.Sprint(s.Completed)},
		{"failed", fmt.Sprint(s.Failed)},
		{"running", fmt.Sprint(s.Running)},
		{"mean reward", fmt.Sprintf("%.4f", s.MeanReward)},
		{"mean turns", fmt.Sprintf("%.2f", s.MeanTurns)},
		{"p50 rollout time", roundDuration(s.P50).String()},
		{"p95 rollout time", roundDuration(s.P95).String()},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
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
		Short: "Completed, failed, running, mean reward and turns, p50/p95 rollout time of a set",
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
			if len(recs) == 0 {
				return fmt.Errorf("set %q has no rollouts in visibility", set)
			}
			return writeSummary(cmd.OutOrStdout(), set, Summarize(recs))
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
