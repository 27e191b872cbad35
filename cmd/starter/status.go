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

// setStatus is what status prints: the latest run of every started
// rollout and what the set's admission says.
type setStatus struct {
	recs []trainer.RolloutRecord
	// admission is the set's admission (zero when it has none).
	admission trainer.AdmissionStatus
}

// counts are the phase and status counts, queued rollouts (phase queued,
// no run yet) included.
func (s setStatus) counts() trainer.StatusCounts {
	c := trainer.CountStatus(s.recs)
	if s.admission.Queued > 0 {
		c.Phases[string(rollout.PhaseQueued)] += s.admission.Queued
	}
	return c
}

func (s setStatus) rollouts() int { return len(s.recs) + s.admission.Queued }

// writeStatus prints the counts (sorted by name) and, when verbose, one line
// per rollout.
func writeStatus(w io.Writer, set string, st setStatus, verbose bool) error {
	counts, recs := st.counts(), st.recs
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "set %s\t%d rollouts\n", set, st.rollouts())
	if a := st.admission; a.MaxInFlight > 0 {
		fmt.Fprintf(tw, "admission\t%d running of at most %d, %d queued\n", a.Running, a.MaxInFlight, a.Queued)
	}
	fmt.Fprintln(tw)
	writeCounts(tw, "PHASE", counts.Phases)
	fmt.Fprintln(tw)
	writeCounts(tw, "STATUS", counts.Statuses)
	if verbose {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "ROLLOUT\tATTEMPT\tTURN\tPHASE\tSTATUS\tRUN")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", r.RolloutID, r.Attempt, r.Turn, r.Phase, trainer.StatusName(r.Status), r.RunID)
		}
		if n := st.admission.Queued; n > 0 {
			fmt.Fprintf(tw, "(%d more queued: not started yet; they start in submission order)\n", n)
		}
	}
	return tw.Flush()
}

// jsonStatus is status -o json: one document with the counts, or, with
// --verbose, one JSON line per started rollout.
func jsonStatus(w io.Writer, set string, st setStatus, verbose bool) error {
	enc := json.NewEncoder(w)
	if !verbose {
		return enc.Encode(struct {
			Set      string `json:"set"`
			Rollouts int    `json:"rollouts"`
			Queued   int    `json:"queued"`
			trainer.StatusCounts
		}{set, st.rollouts(), st.admission.Queued, st.counts()})
	}
	for _, r := range st.recs {
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
		Short: "Count a set's rollouts by phase (queued: not started yet) and execution status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				adm, _, err := c.Admission(cmd.Context(), set)
				if err != nil {
					return err
				}
				recs, err := c.List(cmd.Context(), set)
				if err != nil {
					return err
				}
				st := setStatus{recs: recs, admission: adm}
				if g.output == "json" {
					return jsonStatus(cmd.OutOrStdout(), set, st, verbose)
				}
				return writeStatus(cmd.OutOrStdout(), set, st, verbose)
			})
		},
	}
	cmd.Flags().StringVar(&set, "set", "", "name of the set")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "one line per rollout")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
