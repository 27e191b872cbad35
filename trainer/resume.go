package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// updateConcurrency bounds concurrent updates (resume, acknowledge) and
// status queries. Each waits on a workflow task of its rollout, so they are
// latency-bound: 64 in flight acknowledged a page of 100 twice as fast as 16
// (BenchmarkGatewayFeed), and still bounds what one call puts on a worker.
const updateConcurrency = 64

// controlResumer is the part of protocol.ControlClient resume needs.
type controlResumer interface {
	Resume(ctx context.Context, checkpointID string) (protocol.ResumeResponse, error)
}

// workflowUpdater is the part of client.Client that sends updates.
type workflowUpdater interface {
	UpdateWorkflow(ctx context.Context, options tclient.UpdateWorkflowOptions) (tclient.WorkflowUpdateHandle, error)
}

// ControlToken reads the environment servers' control token from lookup
// (os.LookupEnv in a program), for ResumeRequest.ControlToken.
func ControlToken(lookup func(string) (string, bool)) (string, error) {
	tok, ok := lookup(protocol.ControlTokenEnvVar)
	if !ok || strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%s is not set: the environment servers' control plane needs the token they were started with", protocol.ControlTokenEnvVar)
	}
	if tok != strings.TrimSpace(tok) {
		return "", fmt.Errorf("%s: leading or trailing whitespace", protocol.ControlTokenEnvVar)
	}
	return tok, nil
}

// Resume releases checkpoint r.CheckpointID of r.Set, taken with
// StayPaused: first every environment server, then every running rollout
// of the set, with the same update id the checkpoint's own resume uses.
func (c *Client) Resume(ctx context.Context, r ResumeRequest) (ResumeSummary, error) {
	if err := r.Validate(); err != nil {
		return ResumeSummary{}, err
	}
	parts, _ := participants(r.Participants) // checked by Validate
	servers := map[string]controlResumer{}
	for _, u := range parts {
		tok, err := r.tokenFor(u)
		if err != nil {
			return ResumeSummary{}, err
		}
		servers[u] = c.newControl(u, tok)
	}
	return resumeSet(ctx, resumeTarget{servers: servers, order: parts, lister: c.tc, upd: c.tc}, r.Set, r.CheckpointID)
}

// tokenFor is the control token to send participant u.
func (r ResumeRequest) tokenFor(u string) (string, error) {
	tok := r.ControlToken
	if r.TokenFor != nil {
		var err error
		if tok, err = r.TokenFor(u); err != nil {
			return "", err
		}
	}
	if strings.TrimSpace(tok) == "" {
		return "", errors.New("no control token: the environment servers' control plane needs the token they were started with")
	}
	return tok, nil
}

// Validate reports the first field of r that cannot work (the control
// token aside), before anything is contacted.
func (r ResumeRequest) Validate() error {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return err
	}
	if err := checkpoint.ValidateName("--id", r.CheckpointID); err != nil {
		return err
	}
	_, err := participants(r.Participants)
	return err
}

// participants is protocol.ValidateParticipants with the flag named, as
// the starter always reported it.
func participants(urls []string) ([]string, error) {
	if err := checkParticipantBounds(urls); err != nil {
		return nil, err
	}
	parts, err := protocol.ValidateParticipants(urls)
	if err != nil {
		return nil, fmt.Errorf("--participants: %w", err)
	}
	return parts, nil
}

// resumeTarget is what resumeSet releases: the environment servers, in
// order, and the set's rollouts through visibility and updates.
type resumeTarget struct {
	servers map[string]controlResumer
	order   []string
	lister  visibility.Lister
	upd     workflowUpdater
}

// resumeSet releases checkpoint checkpointID of set: first every
// environment server (a rollout released before its server would only be
// answered "parked"), then every running rollout of the set. Both steps are
// idempotent: a rollout not held, or a server already resumed, accepts the
// resume again. Every failing rollout is reported, not only the first.
func resumeSet(ctx context.Context, t resumeTarget, set, checkpointID string) (ResumeSummary, error) {
	var sum ResumeSummary
	for _, u := range t.order {
		if _, err := t.servers[u].Resume(ctx, checkpointID); err != nil {
			return sum, fmt.Errorf("resume environment server %s for checkpoint %s: %w", u, checkpointID, err)
		}
		sum.Participants++
	}
	recs, err := listLatest(ctx, t.lister, set)
	if err != nil {
		return sum, err
	}
	var ups []rolloutUpdate
	for _, r := range recs {
		if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			ups = append(ups, rolloutUpdate{
				Label: r.WorkflowID, WorkflowID: r.WorkflowID, UpdateID: rollout.ResumeUpdateID(checkpointID),
				Name: rollout.UpdateResume, Arg: rollout.ResumeRequest{CheckpointID: checkpointID},
			})
		}
	}
	out, err := sendUpdates(ctx, t.upd, ups)
	sum.Rollouts, sum.Closed = out.Accepted, out.Closed
	if err != nil {
		return sum, err
	}
	if len(out.Failed) > 0 {
		return sum, fmt.Errorf("resume of %d rollouts failed (the others were resumed; running the same resume again is safe):\n  %s", len(out.Failed), strings.Join(out.Failed, "\n  "))
	}
	return sum, nil
}
