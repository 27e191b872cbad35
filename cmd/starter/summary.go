package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/envs/catalog"
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

// EnvSummary condenses the rollouts of one environment of a set.
type EnvSummary struct {
	Env       string
	Rollouts  int
	Completed int
	Failed    int
	Running   int
	// Passed counts completed rollouts whose reward passes (see Passed).
	Passed int
	// Means over completed rollouts whose result was read.
	MeanReward float64
	MeanTurns  float64
}

// UnknownEnv groups rollouts whose environment could not be read.
const UnknownEnv = "(unknown)"

// Passed reports whether a completed rollout of env with reward counts as a
// pass, by the environment's catalog entry: reward > 0 for dense-reward
// environments (a blackjack episode that wins more hands than it loses),
// reward >= 1 for the rest, and for environments the catalog does not know.
func Passed(env string, reward float64) bool {
	e, _ := catalog.Lookup(env) // the zero entry is not dense
	return e.Passed(reward)
}

// SummarizeByEnv condenses the latest runs of a set per environment, sorted
// by environment name; a record without an environment counts under
// UnknownEnv.
func SummarizeByEnv(recs []RolloutRecord) []EnvSummary {
	type acc struct {
		s             EnvSummary
		reward, turns float64
		withResult    int
	}
	byEnv := map[string]*acc{}
	for _, r := range recs {
		env := r.Env
		if env == "" {
			env = UnknownEnv
		}
		a := byEnv[env]
		if a == nil {
			a = &acc{s: EnvSummary{Env: env}}
			byEnv[env] = a
		}
		a.s.Rollouts++
		switch {
		case r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			a.s.Completed++
			if r.Result != nil {
				a.withResult++
				a.reward += r.Result.Reward
				a.turns += float64(r.Result.Turns)
				if Passed(env, r.Result.Reward) {
					a.s.Passed++
				}
			}
		case r.Closed():
			a.s.Failed++
		default:
			a.s.Running++
		}
	}
	out := make([]EnvSummary, 0, len(byEnv))
	for _, a := range byEnv {
		if a.withResult > 0 {
			a.s.MeanReward = a.reward / float64(a.withResult)
			a.s.MeanTurns = a.turns / float64(a.withResult)
		}
		out = append(out, a.s)
	}
	slices.SortFunc(out, func(a, b EnvSummary) int { return strings.Compare(a.Env, b.Env) })
	return out
}

// writeSummary prints the summary of a set's records: the overall lines,
// then one line per environment.
func writeSummary(w io.Writer, set string, recs []RolloutRecord) error {
	if err := writeOverall(w, set, Summarize(recs)); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeEnvTable(w, SummarizeByEnv(recs))
}

// writeEnvTable prints one line per environment and how "passed" is counted.
func writeEnvTable(w io.Writer, rows []EnvSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENV\tROLLOUTS\tCOMPLETED\tFAILED\tRUNNING\tPASSED\tMEAN REWARD\tMEAN TURNS")
	var dense []string
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.4f\t%.2f\n",
			r.Env, r.Rollouts, r.Completed, r.Failed, r.Running, r.Passed, r.MeanReward, r.MeanTurns)
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
func writeOverall(w io.Writer, set string, s Summary) error {
	return writeTable(w, [][2]string{
		{"set", set},
		{"rollouts", fmt.Sprint(s.Rollouts)},
		{"completed", fmt.Sprint(s.Completed)},
		{"failed", fmt.Sprint(s.Failed)},
		{"running", fmt.Sprint(s.Running)},
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
		Short: "Completed, failed, running, mean reward and turns, p50/p95 rollout time of a set, overall and per environment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withSet(cmd.Context(), set, true, func(_ client.Client, recs []RolloutRecord) error {
				if len(recs) == 0 {
					return fmt.Errorf("set %q has no rollouts in visibility", set)
				}
				return writeSummary(cmd.OutOrStdout(), set, recs)
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
