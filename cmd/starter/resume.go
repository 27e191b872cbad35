package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/checkpoint"
	"github.com/turnstile-rl/turnstile/fanout"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/rollout"
)

// updateConcurrency bounds concurrent updates (resume, acknowledge) and
// status queries.
const updateConcurrency = 16

// controlResumer is the part of protocol.ControlClient resume needs.
type controlResumer interface {
	Resume(ctx context.Context, checkpointID string) (protocol.ResumeResponse, error)
}

// workflowUpdater is the part of client.Client that sends updates.
type workflowUpdater interface {
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// controlToken reads the environment servers' control token from lookup
// (os.LookupEnv in production).
func controlToken(lookup func(string) (string, bool)) (string, error) {
	tok, ok := lookup(protocol.ControlTokenEnvVar)
	if !ok || strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%s is not set: the environment servers' control plane needs the token they were started with", protocol.ControlTokenEnvVar)
	}
	if tok != strings.TrimSpace(tok) {
		return "", fmt.Errorf("%s: leading or trailing whitespace", protocol.ControlTokenEnvVar)
	}
	return tok, nil
}

// ResumeSummary counts what a resume did.
type ResumeSummary struct {
	Participants int // environment servers resumed
	Rollouts     int // running rollouts sent the resume update
	Closed       int // rollouts that closed before the update reached them
}

// resumeSet releases checkpoint checkpointID of set: first every
// environment server (a rollout released before its server would only be
// answered "parked"), then every running rollout of the set. Both steps are
// idempotent: a rollout not held, or a server already resumed, accepts the
// resume again. Every failing rollout is reported, not only the first.
func resumeSet(ctx context.Context, servers map[string]controlResumer, order []string, lister workflowLister, upd workflowUpdater, set, checkpointID string) (ResumeSummary, error) {
	var sum ResumeSummary
	for _, u := range order {
		if _, err := servers[u].Resume(ctx, checkpointID); err != nil {
			return sum, fmt.Errorf("resume environment server %s for checkpoint %s: %w", u, checkpointID, err)
		}
		sum.Participants++
	}
	recs, err := listLatest(ctx, lister, set)
	if err != nil {
		return sum, err
	}
	var ups []rolloutUpdate
	for _, r := range recs {
		if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			ups = append(ups, rolloutUpdate{
				Label: r.WorkflowID, WorkflowID: r.WorkflowID, UpdateID: "resume/" + checkpointID,
				Name: rollout.UpdateResume, Arg: rollout.ResumeRequest{CheckpointID: checkpointID},
			})
		}
	}
	out, err := sendUpdates(ctx, upd, ups)
	sum.Rollouts, sum.Closed = out.Accepted, out.Closed
	if err != nil {
		return sum, err
	}
	if len(out.Failed) > 0 {
		return sum, fmt.Errorf("resume of %d rollouts failed (the others were resumed; running the same resume again is safe):\n  %s", len(out.Failed), strings.Join(out.Failed, "\n  "))
	}
	return sum, nil
}

// rolloutUpdate is one update for sendUpdates.
type rolloutUpdate struct {
	Label      string // names the rollout in a failure
	WorkflowID string
	UpdateID   string
	Name       string
	Arg        any
}

// updateOutcome counts what sendUpdates did.
type updateOutcome struct {
	Accepted int      // updates the rollout accepted
	Closed   int      // rollouts that closed before the update reached them
	Failed   []string // "<label>: <error>" of every failed update, sorted
}

// sendUpdates sends every update with bounded concurrency and collects
// every failure, not only the first. The error is the context's: the
// outcome then counts only the updates sent before it ended.
func sendUpdates(ctx context.Context, upd workflowUpdater, ups []rolloutUpdate) (updateOutcome, error) {
	var (
		mu  sync.Mutex
		out updateOutcome
	)
	err := fanout.Each(ctx, len(ups), updateConcurrency, func(ctx context.Context, i int) error {
		u := ups[i]
		closed, err := sendUpdate(ctx, upd, u.WorkflowID, u.UpdateID, u.Name, u.Arg)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			out.Failed = append(out.Failed, fmt.Sprintf("%s: %v", u.Label, err))
		case closed:
			out.Closed++
		default:
			out.Accepted++
		}
		return nil
	})
	sort.Strings(out.Failed)
	return out, err
}

// sendUpdate sends update name to the current run of workflowID and waits
// for its outcome. closed reports a workflow that had already closed (it
// needs no update any more). updateID makes a retried update a no-op.
func sendUpdate(ctx context.Context, upd workflowUpdater, workflowID, updateID, name string, arg any) (closed bool, err error) {
	h, err := upd.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID,
		UpdateID:     updateID,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	return false, err
}

func newResumeCmd(g *globals) *cobra.Command {
	var (
		set, id string
		urls    []string
	)
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Release a checkpoint taken with --stay-paused: environment servers first, then the set's rollouts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateSet(set); err != nil {
				return err
			}
			if err := checkpoint.ValidateName("--id", id); err != nil {
				return err
			}
			parts, err := validateParticipantURLs(urls)
			if err != nil {
				return err
			}
			tok, err := controlToken(os.LookupEnv)
			if err != nil {
				return err
			}
			servers := map[string]controlResumer{}
			for _, u := range parts {
				servers[u] = protocol.NewControlClient(u, tok, nil)
			}
			c, _, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			sum, err := resumeSet(cmd.Context(), servers, parts, c, c, set, id)
			if err != nil {
				return err
			}
			return writeResumeSummary(cmd.OutOrStdout(), set, id, sum)
		},
	}
	f := cmd.Flags()
	f.StringVar(&set, "set", "", "the set whose rollouts to release")
	f.StringVar(&id, "id", "", "the checkpoint id they are held for")
	f.StringSliceVar(&urls, "participants", nil, "environment server base URLs, comma-separated")
	for _, name := range []string{"set", "id", "participants"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func writeResumeSummary(w io.Writer, set, id string, s ResumeSummary) error {
	_, err := fmt.Fprintf(w, "resumed checkpoint %s of set %s: %d environment servers, %d rollouts (%d had closed already)\n",
		id, set, s.Participants, s.Rollouts, s.Closed)
	return err
}
