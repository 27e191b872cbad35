// Package bookkeeping holds the activities that keep a set's bookkeeping: a
// rollout's reports to its group ledger, the cancellation of a failed
// group's members, and the check of the set's fence record.
package bookkeeping

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// cancelConcurrency bounds concurrent RequestCancel calls of one group.
const cancelConcurrency = 16

// GroupActivities are the activities of rollout groups. They talk to
// Temporal itself (a member's report to its group's ledger, a failed
// group's cancellation of its members), so they hold a Temporal client;
// register a pointer to it on the worker beside Activities.
type GroupActivities struct {
	Client client.Client
	// TaskQueue is where a ledger runs; empty means the task queue of the
	// activity reporting to it (the rollout's).
	TaskQueue string
}

// ReportToGroup delivers a member's report to its group's ledger and
// returns the verdict, starting the ledger if it does not run (update with
// start, one update id per rollout, attempt and kind, so a retried activity
// is one report). A ledger that closed (its group complete or failed)
// answers from its result: a failed group stays failed, a result it counts
// already changes nothing, and any other report to a complete one (a member
// restored after the group completed) reopens it as a new run that starts
// from its final state.
func (g *GroupActivities) ReportToGroup(ctx context.Context, r rollout.GroupReport) (rollout.GroupVerdict, error) {
	if err := checkReport(r); err != nil {
		return rollout.GroupVerdict{}, err
	}
	v, err := g.update(ctx, r, nil, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
	if !ledgerClosed(err) {
		return v, err
	}
	prior, err := g.closedState(ctx, r)
	if err != nil {
		return rollout.GroupVerdict{}, err
	}
	if prior != nil && (prior.Status == rollout.GroupFailed || knownDone(*prior, r)) {
		return rollout.GroupVerdict{Status: prior.Status, Reason: prior.Reason}, nil
	}
	return g.update(ctx, r, prior, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE)
}

// knownDone says whether a closed ledger already counts r's result: a
// repeated report, which need not start the ledger again.
func knownDone(st rollout.GroupState, r rollout.GroupReport) bool {
	if r.Kind != rollout.ReportDone || r.Repeat >= len(st.Members) {
		return false
	}
	m := st.Members[r.Repeat]
	return m.State == rollout.MemberDone && m.Attempt >= r.Attempt
}

// checkReport refuses a report no ledger could accept, before any call.
func checkReport(r rollout.GroupReport) error {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return rollout.BadInput("group report: %v", err)
	}
	if err := rollout.ValidateName("group", r.Group, rollout.MaxSetLen); err != nil {
		return rollout.BadInput("group report: %v", err)
	}
	if r.Size < 1 || r.Size > rollout.MaxGroupSize || r.Budget < 0 || r.Budget > rollout.MaxGroupRetries {
		return rollout.BadInput("group report of %s: size %d or budget %d out of range", r.RolloutID, r.Size, r.Budget)
	}
	if err := r.Validate(r.Set, r.Group, r.Size); err != nil {
		return rollout.BadInput("group report: %v", err)
	}
	return nil
}

// update sends r to the ledger with update-with-start; prior is the state
// a new run starts from.
func (g *GroupActivities) update(ctx context.Context, r rollout.GroupReport, prior *rollout.GroupState, reuse enumspb.WorkflowIdReusePolicy) (rollout.GroupVerdict, error) {
	queue := g.TaskQueue
	if queue == "" {
		queue = activity.GetInfo(ctx).TaskQueue
	}
	op := g.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       rollout.GroupWorkflowID(r.Set, r.Group),
		TaskQueue:                queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    reuse,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutGroup).ValueSet(r.Group),
			rollout.GroupStatusKey.ValueSet(string(rollout.GroupRunning))),
		StaticSummary: fmt.Sprintf("group %s of set %s · %d rollouts · retry budget %d", r.Group, r.Set, r.Size, r.Budget),
	}, rollout.GroupWorkflowName, rollout.GroupInput{Set: r.Set, Group: r.Group, Size: r.Size, Budget: r.Budget, Prior: prior})
	h, err := g.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: rollout.UpdateGroupReport, UpdateID: r.UpdateID(), Args: []any{r},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) && strings.Contains(strings.ToLower(err.Error()), "search attribute") {
		// Retrying cannot register it: say what to do instead of hanging.
		return rollout.GroupVerdict{}, rollout.BadInput("group %s: start its ledger: %v; register the search attributes turnstile sets (`starter setup`)", r.Group, err)
	}
	if err != nil {
		return rollout.GroupVerdict{}, fmt.Errorf("report %s of %s to group %s: %w", r.Kind, r.RolloutID, r.Group, err)
	}
	var v rollout.GroupVerdict
	if err := h.Get(ctx, &v); err != nil {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) {
			// The ledger's validator refused the report: it will again.
			return rollout.GroupVerdict{}, rollout.BadInput("group %s refused the report of %s: %v", r.Group, r.RolloutID, err)
		}
		return rollout.GroupVerdict{}, fmt.Errorf("report %s of %s to group %s: %w", r.Kind, r.RolloutID, r.Group, err)
	}
	return v, nil
}

// ledgerClosed says whether an update-with-start found the ledger closed
// and not to be started again under its reuse policy.
func ledgerClosed(err error) bool {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	return errors.As(err, &already)
}

// closedState reads a closed ledger's final state; nil when it closed
// without one (terminated by an operator: its group starts afresh).
func (g *GroupActivities) closedState(ctx context.Context, r rollout.GroupReport) (*rollout.GroupState, error) {
	var st rollout.GroupState
	err := g.Client.GetWorkflow(ctx, rollout.GroupWorkflowID(r.Set, r.Group), "").Get(ctx, &st)
	var wee *temporal.WorkflowExecutionError
	switch {
	case errors.As(err, &wee):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the closed ledger of group %s: %w", r.Group, err)
	}
	return &st, nil
}

// CancelGroupMembers requests the cancellation of the named members of a
// failed group (their current runs). A member already closed, or never
// started, is counted, not an error.
func (g *GroupActivities) CancelGroupMembers(ctx context.Context, in rollout.CancelGroupMembersInput) (rollout.CancelGroupMembersResult, error) {
	for _, k := range in.Repeats {
		if k < 0 || k >= rollout.MaxGroupSize {
			return rollout.CancelGroupMembersResult{}, rollout.BadInput("cancel members of group %s: repeat %d out of range", in.Group, k)
		}
	}
	var cancelled, closed atomic.Int64
	err := fanout.Each(ctx, len(in.Repeats), cancelConcurrency, func(ctx context.Context, i int) error {
		id := rollout.WorkflowID(rollout.GroupRolloutID(in.Set, in.Group, in.Repeats[i]))
		err := g.Client.CancelWorkflow(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			closed.Add(1)
		case err != nil:
			return fmt.Errorf("cancel %s: %w", id, err)
		default:
			cancelled.Add(1)
		}
		return nil
	})
	if err != nil {
		return rollout.CancelGroupMembersResult{}, fmt.Errorf("cancel members of failed group %s: %w", in.Group, err)
	}
	activity.GetLogger(ctx).Info("cancelled the members of a failed group", "group", in.Group, "cancelled", cancelled.Load(), "closed", closed.Load(), "reason", in.Reason)
	return rollout.CancelGroupMembersResult{Cancelled: int(cancelled.Load()), Closed: int(closed.Load())}, nil
}
