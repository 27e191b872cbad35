package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// writeStatus prints the counts (sorted by name) and, when verbose, one line
// per rollout.
func writeStatus(w io.Writer, set string, recs []trainer.RolloutRecord, verbose bool) error {
	counts := trainer.CountStatus(recs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "set %s\t%d rollouts\n\n", set, len(recs))
	writeCounts(tw, "PHASE", counts.Phases)
	fmt.Fprintln(tw)
	writeCounts(tw, "STATUS", counts.Statuses)
	if verbose {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "ROLLOUT\tATTEMPT\tTURN\tPHASE\tSTATUS\tRUN")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", r.RolloutID, r.Attempt, r.Turn, r.Phase, trainer.StatusName(r.Status), r.RunID)
		}
	}
	return tw.Flush()
}

// jsonStatus is status -o json: one document with the counts, or, with
// --verbose, one JSON line per rollout.
func jsonStatus(w io.Writer, set string, recs []trainer.RolloutRecord, verbose bool) error {
	enc := json.NewEncoder(w)
	if !verbose {
		return enc.Encode(struct {
			Set      string `json:"set"`
			Rollouts int    `json:"rollouts"`
			trainer.StatusCounts
		}{set, len(recs), trainer.CountStatus(recs)})
	}
	for _, r := range recs {
		line := statusLine{r.RolloutID, r.Attempt, r.Turn, r.Phase, trainer.StatusName(r.Status), r.RunID, r.Env}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

// statusLine is one rollout in status -o json --verbose.
type statusLine struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int64  `json:"attempt"`
	Turn      int64  `json:"turn"`
	Phase     string `json:"phase"`
	Status    string `json:"status"`
	RunID     string `json:"run_id"`
	Env       string `json:"env,omitempty"`
}

func writeCounts(w io.Writer, title string, counts map[string]int) {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "%s\tCOUNT\n", title)
	for _, n := range names {
		fmt.Fprintf(w, "%s\t%d\n", n, counts[n])
	}
}

func newStatusCmd(g *globals) *cobra.Command {
	var (
		set     string
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count a set's rollouts by phase and execution status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				recs, err := c.List(cmd.Context(), set)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return jsonStatus(cmd.OutOrStdout(), set, recs, verbose)
				}
				return writeStatus(cmd.OutOrStdout(), set, recs, verbose)
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "one line per rollout")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
