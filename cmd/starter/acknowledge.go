package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// readReceipts reads a receipts file, reporting the lines of failed
// rollouts it skips on stderr.
func readReceipts(path string, stderr io.Writer) ([]trainer.ReceiptLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--receipts: %w", err)
	}
	defer f.Close()
	lines, skipped, err := trainer.ParseReceipts(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "%s: %s\n", path, s)
	}
	return lines, nil
}

func newAcknowledgeCmd(g *globals) *cobra.Command {
	var (
		req      trainer.AckRequest
		receipts string
	)
	cmd := &cobra.Command{
		Use:   "acknowledge",
		Short: "Acknowledge completed results held for the pipeline (a validated batch)",
		Long: "Acknowledge results of a set submitted with --require-ack. With --receipts, the whole file is checked\n" +
			"against what every rollout holds first, and nothing is acknowledged if any line is wrong:\n" +
			"  starter results --set s1 > r.jsonl && starter acknowledge --set s1 --receipts r.jsonl\n" +
			"With --all-completed, every rollout awaiting acknowledgement is acknowledged with its current receipt.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(req.Set); err != nil {
				return err
			}
			if (receipts == "") == !req.AllCompleted {
				return errors.New("give --receipts FILE or --all-completed (one of them)")
			}
			if receipts != "" {
				var err error
				if req.Receipts, err = readReceipts(receipts, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				plan, err := c.PlanAck(cmd.Context(), req)
				if err != nil {
					return err
				}
				sum, err := c.SendAcks(cmd.Context(), plan)
				werr := g.emit(cmd.OutOrStdout(), struct {
					Set string `json:"set"`
					trainer.AckSummary
				}{req.Set, sum}, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "set %s: acknowledged %d rollouts (%d accepted before, %d closed meanwhile)\n",
						req.Set, sum.Acknowledged, sum.Already, sum.Closed)
					return err
				})
				return errors.Join(err, werr)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "name of the set")
	f.StringVar(&receipts, "receipts", "", "JSON lines of receipts, or of results carrying one (the output of starter results)")
	f.BoolVar(&req.AllCompleted, "all-completed", false, "acknowledge every rollout awaiting acknowledgement with its current receipt")
	cmd.MarkFlagsMutuallyExclusive("receipts", "all-completed")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}
