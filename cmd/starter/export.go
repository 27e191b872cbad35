package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func newExportCmd(g *globals) *cobra.Command {
	var set, file, dir string
	var opts trainer.ExportOptions
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write one JSON line per finished rollout of a set: ids, group, reward, usage and the trajectory with token fields",
		Long: "Write one JSON line per finished rollout (completed, or failed with its reason) of a set, in the format\n" +
			"of docs/trajectory.schema.json: messages in OpenAI's shape, each assistant message with its model\n" +
			"call's prompt_token_ids, generation_token_ids and generation_log_probs (or tokens \"absent\").\n" +
			"It streams, and may run while the set is still going: rollouts not finished yet are left out.\n" +
			"A dataset rollout's line says where its group stands (group_status: complete, failed and why,\n" +
			"running); --complete-groups writes only what a trainer may use: completed rollouts of complete groups.\n" +
			"Trajectories are read from the worker's transcript directory.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rollout.ValidateSet(set); err != nil {
				return err
			}
			var opener storage.Opener
			defer opener.Close()
			store, err := openTranscripts(cmd.Context(), &opener, dir)
			if err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				return export(cmd, c, exportTarget{set: set, file: file, store: store, opts: opts})
			})
		},
	}
	defaultDir := os.Getenv(workers.EnvTranscriptDir)
	if defaultDir == "" {
		defaultDir = workers.DefaultTranscriptDir
	}
	f := cmd.Flags()
	f.StringVar(&set, "set", "", "name of the set")
	// Not -o: that is every command's output format (table or json); an
	// export is always JSON lines.
	f.StringVarP(&file, "file", "f", "", "file to write (default: standard output); written under a temporary name and renamed when complete")
	f.BoolVar(&opts.CompleteGroupsOnly, "complete-groups", false, "write only completed rollouts whose group (if any) is complete: a trainer's view, with no failed or partial group")
	f.StringVar(&dir, "transcript-dir", defaultDir, "the worker's transcript store: a directory or a storage URL such as s3://bucket/prefix?region=… (env "+workers.EnvTranscriptDir+")")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}

// openTranscripts opens the worker's transcript store, refusing a
// directory that does not exist: transcriptstore.Open would create an empty
// one, and the export would fail on the first rollout instead of naming the
// mistake. An object store is opened as it is.
func openTranscripts(ctx context.Context, o *storage.Opener, dir string) (*transcriptstore.Store, error) {
	if location.IsURL(dir) {
		store, err := transcriptstore.OpenLocation(ctx, o, dir)
		if err != nil {
			return nil, fmt.Errorf("--transcript-dir: %w", err)
		}
		return store, nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--transcript-dir (the worker's %s): %w", workers.EnvTranscriptDir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--transcript-dir %s (the worker's %s): not a directory", dir, workers.EnvTranscriptDir)
	}
	store, err := transcriptstore.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("--transcript-dir: %w", err)
	}
	return store, nil
}

// exportTarget is what one `starter export` writes, and where from.
type exportTarget struct {
	set, file string
	store     *transcriptstore.Store
	opts      trainer.ExportOptions
}

// export writes the set's lines to standard output or to the file, and a
// count of them to standard error.
func export(cmd *cobra.Command, c *trainer.Client, t exportTarget) error {
	var stats trainer.ExportStats
	write := func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		var err error
		if stats, err = c.ExportWith(cmd.Context(), t.set, t.store, bw, t.opts); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("write export: %w", err)
		}
		return nil
	}
	var err error
	if t.file == "" {
		err = write(cmd.OutOrStdout())
	} else {
		err = writeFileAtomically(t.file, write)
	}
	if err != nil {
		return err
	}
	excluded := ""
	if t.opts.CompleteGroupsOnly {
		excluded = fmt.Sprintf("; %d finished rollouts left out (failed, or their group is not complete)", stats.Excluded)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "exported %d rollouts of set %s (%d completed, %d of them held for acknowledgement, %d failed); %d runs skipped (superseded or acknowledged meanwhile)%s\n",
		stats.Completed+stats.Failed, t.set, stats.Completed, stats.Held, stats.Failed, stats.Skipped, excluded)
	return nil
}

// writeFileAtomically writes path through write under a temporary name
// and renames it into place only when write succeeded, so an interrupted
// export never leaves a file that looks complete.
func writeFileAtomically(path string, write func(io.Writer) error) error {
	tmp := path + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--file: close %s: %w", tmp, cerr)
	}
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			err = fmt.Errorf("--file: %w", err)
		}
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
