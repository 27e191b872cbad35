package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// writeCheckpointResult prints res as an aligned two-column table.
func writeCheckpointResult(w io.Writer, res checkpoint.CheckpointResult) error {
	return writeTable(w, [][2]string{
		{"checkpoint", orDash(res.CheckpointID)},
		{"dir", orDash(res.Dir)},
		{"members", fmt.Sprint(res.Members)},
		{"parked", fmt.Sprint(res.Parked)},
		{"completed_unacked", fmt.Sprint(res.CompletedUnacked)},
		{"closed", fmt.Sprint(res.Closed)},
		{"bytes", fmt.Sprint(res.Bytes)},
		{"manifest digest", orDash(res.ManifestDigest)},
		{"resumed", fmt.Sprint(res.Resumed)},
		{"cut_ms", fmt.Sprint(res.CutMillis)},
		{"total_ms", fmt.Sprint(res.TotalMillis)},
		{"tag", orDash(res.Tag)},
		{"retention", retentionSummary(res)},
	})
}

// writeTable prints rows of name and value as an aligned two-column table.
func writeTable(w io.Writer, rows [][2]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// orDash shows an empty value as "-", so every table row has two columns.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// announce prints that a coordinator workflow has started, so an operator
// learns its id while it runs.
func announce(w io.Writer, started *trainer.Started) func(trainer.Started) {
	return func(s trainer.Started) {
		*started = s
		fmt.Fprintf(w, "started %s (run %s) on task queue %s\n", s.WorkflowID, s.RunID, s.TaskQueue)
	}
}

func newCheckpointCmd(g *globals) *cobra.Command {
	var (
		req      trainer.CheckpointRequest
		deadline string
		wait     bool
	)
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Take a coordinated checkpoint of a set (Checkpoint workflow)",
		Long: "Start the Checkpoint workflow: close admission at the environment servers, park every rollout of the\n" +
			"set at a boundary, commit everything under <root>/<id>/ (manifest last), then resume — or stay paused.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if deadline != "" {
				req.Timeout = 0 // the default --timeout gives way to --deadline
				t, err := time.Parse(time.RFC3339, deadline)
				if err != nil {
					return fmt.Errorf("--deadline %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", deadline)
				}
				req.Deadline = t
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				var started trainer.Started
				c.OnStart = announce(cmd.ErrOrStderr(), &started)
				res, err := c.Checkpoint(cmd.Context(), req, wait)
				if err != nil {
					return err
				}
				if res == nil {
					return g.emit(cmd.OutOrStdout(), started, func(io.Writer) error { return nil })
				}
				return g.emit(cmd.OutOrStdout(), res, func(w io.Writer) error { return writeCheckpointResult(w, *res) })
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "the set to checkpoint")
	f.StringVar(&req.CheckpointID, "id", "", "checkpoint id (workflow ID checkpoint/<id>; files under <root>/<id>/)")
	f.StringVar(&req.Root, "root", "", "directory the checkpoint goes under (made absolute), or a storage URL such as s3://bucket/prefix?region=…")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated, in a fixed order")
	f.DurationVar(&req.Timeout, "timeout", 60*time.Second, "time the cut may take (turned into an absolute deadline at the start)")
	f.StringVar(&deadline, "deadline", "", "absolute deadline of the cut (RFC 3339), instead of --timeout")
	f.BoolVar(&req.StayPaused, "stay-paused", false, "leave every environment server and rollout parked after the commit (planned shutdown; release with: starter resume)")
	f.BoolVar(&wait, "wait", false, "wait for the checkpoint and print its result")
	f.StringVar(&req.Tag, "tag", "", "tag of the checkpoint: the trainer step or policy version it belongs to")
	f.IntVar(&req.Keep, "keep", 0, "after the commit keep the newest N checkpoints of the set (and the pinned ones), deleting the others; 0: keep all")
	cmd.MarkFlagsMutuallyExclusive("timeout", "deadline")
	for _, name := range []string{"set", "id", "root", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// retentionSummary says what the retention after the commit did.
func retentionSummary(res checkpoint.CheckpointResult) string {
	switch {
	case res.RetentionError != "":
		return "FAILED: " + res.RetentionError
	case res.Retention == nil:
		return "-"
	}
	r := res.Retention
	return fmt.Sprintf("kept %d (%d bytes), deleted %d (%d bytes freed)", len(r.Kept), r.KeptBytes, len(r.Deleted), r.FreedBytes)
}
