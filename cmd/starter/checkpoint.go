package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/checkpoint"
)

// CheckpointRequest is one `starter checkpoint`.
type CheckpointRequest struct {
	Set          string
	CheckpointID string
	Root         string
	Participants []string
	// Timeout (a duration) or Deadline (absolute) bounds the cut; exactly
	// one is set.
	Timeout    time.Duration
	Deadline   time.Time
	StayPaused bool
}

// CheckpointInput turns r into the workflow's input: the root made absolute
// against cwd, the participants checked. Bad input is an error naming the
// flag; nothing is started.
func (r CheckpointRequest) CheckpointInput(cwd string) (checkpoint.CheckpointInput, error) {
	if err := validateSet(r.Set); err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	if err := checkpoint.ValidateName("--id", r.CheckpointID); err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	root, err := absRoot(r.Root, cwd)
	if err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	parts, err := validateParticipantURLs(r.Participants)
	if err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	in := checkpoint.CheckpointInput{
		CheckpointID: r.CheckpointID, Set: r.Set, Root: root, Participants: parts, StayPaused: r.StayPaused,
	}
	switch {
	case !r.Deadline.IsZero() && r.Timeout != 0:
		return checkpoint.CheckpointInput{}, errors.New("give --timeout or --deadline, not both")
	case !r.Deadline.IsZero():
		in.Deadline = r.Deadline.UTC()
	case r.Timeout > 0:
		in.Timeout = r.Timeout.String()
	default:
		return checkpoint.CheckpointInput{}, fmt.Errorf("--timeout %s: want a positive duration such as 60s", r.Timeout)
	}
	return in, nil
}

// absRoot makes a checkpoint root absolute against cwd (the worker may run
// in another directory, so a relative path would mean something else there).
func absRoot(root, cwd string) (string, error) {
	if strings.TrimSpace(root) == "" {
		return "", errors.New("--root: a directory is required")
	}
	if !filepath.IsAbs(root) {
		if !filepath.IsAbs(cwd) {
			return "", fmt.Errorf("--root %q is relative and the working directory %q is not absolute", root, cwd)
		}
		root = filepath.Join(cwd, root)
	}
	return filepath.Clean(root), nil
}

// validateParticipantURLs checks the environment servers' base URLs: at
// least one, each an http(s) URL with a host, none twice. Their order is
// kept: it numbers the servers' artifacts in the checkpoint.
func validateParticipantURLs(urls []string) ([]string, error) {
	if len(urls) == 0 {
		return nil, errors.New("--participants: at least one environment server URL is required")
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(urls))
	for _, raw := range urls {
		u := strings.TrimRight(strings.TrimSpace(raw), "/")
		parsed, err := url.Parse(u)
		if u == "" || err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return nil, fmt.Errorf("--participants: %q is not an http:// or https:// URL", raw)
		}
		if seen[u] {
			return nil, fmt.Errorf("--participants: %s is listed twice", u)
		}
		seen[u] = true
		out = append(out, u)
	}
	return out, nil
}

// CheckpointStartOptions start checkpoint id at most once: a running one
// is not started twice, and one that committed is not run again; an
// aborted one may be retried under the same id.
func CheckpointStartOptions(checkpointID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       checkpoint.CheckpointWorkflowID(checkpointID),
		TaskQueue:                                taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            "checkpoint " + checkpointID,
	}
}

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

// startCoordinator starts a Checkpoint or Restore workflow and, when wait,
// waits for its result into out. A failed workflow is an error carrying the
// workflow's own message.
func startCoordinator(ctx context.Context, c workflowStarter, opts client.StartWorkflowOptions, name string, in, out any, wait bool, w io.Writer) error {
	run, err := c.ExecuteWorkflow(ctx, opts, name, in)
	if err != nil {
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &already) {
			return fmt.Errorf("%s is already running or was already completed: %w", opts.ID, err)
		}
		return fmt.Errorf("start %s: %w", opts.ID, err)
	}
	fmt.Fprintf(w, "started %s (run %s) on task queue %s\n", opts.ID, run.GetRunID(), opts.TaskQueue)
	if !wait {
		return nil
	}
	if err := run.Get(ctx, out); err != nil {
		var wee *temporal.WorkflowExecutionError
		if errors.As(err, &wee) {
			return fmt.Errorf("%s failed: %s", opts.ID, failureMessage(err))
		}
		return fmt.Errorf("wait for %s: %w", opts.ID, err)
	}
	return nil
}

// runCoordinator is the body of `starter checkpoint` and `starter restore`:
// connect, start the coordinator workflow, and, when wait, print its result
// of type R with write.
func runCoordinator[R any](cmd *cobra.Command, g *globals, opts client.StartWorkflowOptions, name string, in any, wait bool, write func(io.Writer, R) error) error {
	c, _, err := g.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	var res R
	if err := startCoordinator(cmd.Context(), c, opts, name, in, &res, wait, cmd.ErrOrStderr()); err != nil {
		return err
	}
	if !wait {
		return nil
	}
	return write(cmd.OutOrStdout(), res)
}

func newCheckpointCmd(g *globals) *cobra.Command {
	var (
		req      CheckpointRequest
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
			cwd, err := os.Getwd()
			if err != nil {
				return err
			}
			in, err := req.CheckpointInput(cwd)
			if err != nil {
				return err
			}
			opts := CheckpointStartOptions(in.CheckpointID, g.taskQueue)
			return runCoordinator(cmd, g, opts, checkpoint.CheckpointWorkflowName, in, wait, writeCheckpointResult)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "the set to checkpoint")
	f.StringVar(&req.CheckpointID, "id", "", "checkpoint id (workflow ID checkpoint/<id>; files under <root>/<id>/)")
	f.StringVar(&req.Root, "root", "", "directory the checkpoint goes under (made absolute)")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated, in a fixed order")
	f.DurationVar(&req.Timeout, "timeout", 60*time.Second, "time the cut may take (turned into an absolute deadline at the start)")
	f.StringVar(&deadline, "deadline", "", "absolute deadline of the cut (RFC 3339), instead of --timeout")
	f.BoolVar(&req.StayPaused, "stay-paused", false, "leave every environment server and rollout parked after the commit (planned shutdown; release with `starter resume`)")
	f.BoolVar(&wait, "wait", false, "wait for the checkpoint and print its result")
	cmd.MarkFlagsMutuallyExclusive("timeout", "deadline")
	for _, name := range []string{"set", "id", "root", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
