package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
)

// absLocation makes a directory absolute; a storage URL stays as it is.
func absLocation(flag, where string) (string, error) {
	if location.IsURL(where) {
		return where, nil
	}
	if strings.TrimSpace(where) == "" {
		return "", fmt.Errorf("%s: a directory or storage URL is required", flag)
	}
	abs, err := filepath.Abs(where)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", flag, where, err)
	}
	return abs, nil
}

func newGCCmd(g *globals) *cobra.Command {
	var (
		req   trainer.GCRequest
		roots []string
		sweep bool
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Apply a set's checkpoint retention, then mark and sweep the transcript store",
		Long: "Keep the newest --keep committed checkpoints of --set under each --root (and every pinned one),\n" +
			"deleting the others; with --sweep, mark every transcript blob a committed checkpoint under the roots\n" +
			"or a running rollout (held results included) references, and delete the unreferenced blobs older\n" +
			"than --grace. Workers must be running: running rollouts are asked for their transcripts.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, r := range roots {
				abs, err := absLocation("--root", r)
				if err != nil {
					return err
				}
				req.Roots = append(req.Roots, abs)
			}
			var opener storage.Opener
			defer opener.Close()
			if !sweep {
				req.Transcripts = ""
			} else if _, err := openTranscripts(cmd.Context(), &opener, req.Transcripts); err != nil {
				return err
			} else if req.Transcripts, err = absLocation("--transcript-dir", req.Transcripts); err != nil {
				return err
			}
			if sweep && req.Grace < transcriptstore.MinGrace {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: --grace %s is below %s: a blob a worker writes during the sweep may be deleted\n", req.Grace, transcriptstore.MinGrace)
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				res, err := c.GC(cmd.Context(), req, &opener)
				if err != nil {
					return err
				}
				return g.emit(cmd.OutOrStdout(), res, func(w io.Writer) error { return writeGCResult(w, res) })
			})
		},
	}
	defaultDir := os.Getenv(workers.EnvTranscriptDir)
	if defaultDir == "" {
		defaultDir = workers.DefaultTranscriptDir
	}
	f := cmd.Flags()
	f.StringSliceVar(&roots, "root", nil, "checkpoint roots (directories or storage URLs), comma-separated or repeated")
	f.StringVar(&req.Set, "set", "", "the set whose checkpoints --keep applies to")
	f.IntVar(&req.Keep, "keep", 0, "keep the newest N committed checkpoints of --set (and the pinned ones); 0: delete none")
	f.BoolVar(&sweep, "sweep", false, "mark and sweep the transcript store")
	f.StringVar(&req.Transcripts, "transcript-dir", defaultDir, "the worker's transcript store: a directory or a storage URL (env "+workers.EnvTranscriptDir+")")
	f.DurationVar(&req.Grace, "grace", transcriptstore.MinGrace, "an unreferenced blob is deleted only if older than this (see docs/operations.md)")
	f.DurationVar(&req.QueryFor, "query-for", trainer.DefaultGCQueryFor, "how long the mark keeps asking a running rollout that does not answer before it stops, sweeping nothing")
	return cmd
}

// writeGCResult prints what a garbage collection kept and freed.
func writeGCResult(w io.Writer, r trainer.GCResult) error {
	return writeTable(w, [][2]string{
		{"checkpoints kept", orDash(strings.Join(r.CheckpointsKept, " "))},
		{"checkpoints deleted", orDash(strings.Join(r.CheckpointsDeleted, " "))},
		{"checkpoint bytes kept", fmt.Sprint(r.CheckpointBytesKept)},
		{"checkpoint bytes freed", fmt.Sprint(r.CheckpointBytesFreed)},
		{"marked checkpoints", fmt.Sprint(r.MarkedCheckpoints)},
		{"live rollouts", fmt.Sprint(r.LiveRollouts)},
		{"marked blobs", fmt.Sprint(r.Marked)},
		{"blobs kept", fmt.Sprint(r.Sweep.KeptBlobs)},
		{"blob bytes kept", fmt.Sprint(r.Sweep.KeptBytes)},
		{"young blobs kept", fmt.Sprint(r.Sweep.Young)},
		{"blobs freed", fmt.Sprint(r.Sweep.FreedBlobs)},
		{"blob bytes freed", fmt.Sprint(r.Sweep.FreedBytes)},
	})
}

func newPinCmd(g *globals) *cobra.Command {
	var root, set, tag string
	cmd := &cobra.Command{
		Use:   "pin",
		Short: "Pin the committed checkpoints of a set with a tag (or an id): retention never deletes them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			where, err := absLocation("--root", root)
			if err != nil {
				return err
			}
			var opener storage.Opener
			defer opener.Close()
			st, err := opener.Open(cmd.Context(), where)
			if err != nil {
				return fmt.Errorf("--root %s: %w", where, err)
			}
			ids, err := retention.Pin(cmd.Context(), st, set, tag)
			if err != nil {
				return err
			}
			return g.emit(cmd.OutOrStdout(), map[string]any{"pinned": ids}, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "pinned %s\n", strings.Join(ids, " "))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&root, "root", "", "the checkpoint root (directory or storage URL)")
	f.StringVar(&set, "set", "", "the set")
	f.StringVar(&tag, "tag", "", "the tag (trainer step, policy version) or checkpoint id to pin")
	for _, name := range []string{"root", "set", "tag"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
