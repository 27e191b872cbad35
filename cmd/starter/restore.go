package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/checkpoint"
)

// RestoreRequest is one `starter restore`.
type RestoreRequest struct {
	CheckpointID string
	// RestoreID names the restore (empty: the checkpoint id); restoring a
	// checkpoint a second time takes a new one.
	RestoreID    string
	Root         string
	Participants []string
}

// RestoreInput turns r into the workflow's input (root made absolute
// against cwd); the rollouts go to taskQueue.
func (r RestoreRequest) RestoreInput(cwd, taskQueue string) (checkpoint.RestoreInput, error) {
	if err := checkpoint.ValidateName("--id", r.CheckpointID); err != nil {
		return checkpoint.RestoreInput{}, err
	}
	if r.RestoreID != "" {
		if err := checkpoint.ValidateName("--restore-id", r.RestoreID); err != nil {
			return checkpoint.RestoreInput{}, err
		}
	}
	root, err := absRoot(r.Root, cwd)
	if err != nil {
		return checkpoint.RestoreInput{}, err
	}
	parts, err := validateParticipantURLs(r.Participants)
	if err != nil {
		return checkpoint.RestoreInput{}, err
	}
	return checkpoint.RestoreInput{CheckpointID: r.CheckpointID, RestoreID: r.RestoreID, Root: root, Participants: parts, TaskQueue: taskQueue}, nil
}

// RestoreStartOptions start the restore of in (workflow ID
// restore/<restore_id>, the restore id defaulting to the checkpoint id). A
// restore may be run again once it has closed (a re-run finishes an
// interrupted one and never starts an attempt twice), but not while one is
// running.
func RestoreStartOptions(in checkpoint.RestoreInput, taskQueue string) client.StartWorkflowOptions {
	restoreID := in.RestoreID
	if restoreID == "" {
		restoreID = in.CheckpointID
	}
	return client.StartWorkflowOptions{
		ID:                                       checkpoint.RestoreWorkflowID(restoreID),
		TaskQueue:                                taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            "restore " + restoreID + " of checkpoint " + in.CheckpointID,
	}
}

// writeRestoreResult prints res as an aligned two-column table.
func writeRestoreResult(w io.Writer, res checkpoint.RestoreResult) error {
	return writeTable(w, [][2]string{
		{"checkpoint", orDash(res.CheckpointID)},
		{"restored", fmt.Sprint(res.Restored)},
		{"started_over", fmt.Sprint(res.StartedOver)},
		{"offered_again", fmt.Sprint(res.OfferedAgain)},
		{"started", fmt.Sprint(res.Started)},
		{"terminated", fmt.Sprint(res.Terminated)},
		{"attempts digest", orDash(res.AttemptsDigest)},
	})
}

func newRestoreCmd(g *globals) *cobra.Command {
	var (
		req  RestoreRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a committed checkpoint as new attempts (Restore workflow)",
		Long: "Start the Restore workflow: validate the whole checkpoint under <root>/<id>/, install the environment\n" +
			"servers as the new attempts, start every unfinished rollout from its boundary, then resume.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cwd, err := os.Getwd()
			if err != nil {
				return err
			}
			in, err := req.RestoreInput(cwd, g.taskQueue)
			if err != nil {
				return err
			}
			opts := RestoreStartOptions(in, g.taskQueue)
			return runCoordinator(cmd, g, opts, checkpoint.RestoreWorkflowName, in, wait, writeRestoreResult)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.CheckpointID, "id", "", "checkpoint id to restore")
	f.StringVar(&req.RestoreID, "restore-id", "", "name of this restore (default: the checkpoint id); restoring the same checkpoint again takes a new one")
	f.StringVar(&req.Root, "root", "", "directory the checkpoint is under (made absolute)")
	f.StringSliceVar(&req.Participants, "participants", nil, "environment server base URLs, comma-separated, in the order they had at checkpoint time")
	f.BoolVar(&wait, "wait", false, "wait for the restore and print its result")
	for _, name := range []string{"id", "root", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
