package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/rollout"
)

// Group statuses in an export, beside rollout.GroupRunning, GroupComplete
// and GroupFailed.
const (
	// GroupUnknown: the group has no ledger (its rollouts were started
	// before groups had one), so nothing says whether it is whole.
	GroupUnknown = "unknown"
)

// ExportGroup is where a rollout's group stands, as its ledger says: a
// trainer uses a group's results only when it is complete, and drops a
// failed group whole, so a group never enters training shrunk.
type ExportGroup struct {
	// Status is "complete" (every rollout has a result), "failed" (Reason
	// says why; its other rollouts were cancelled), "running" or
	// "unknown".
	Status      string `json:"status"`
	Size        int    `json:"size"`
	Retries     int    `json:"retries"`
	RetryBudget int    `json:"retry_budget"`
	Reason      string `json:"reason,omitempty"`
}

// ExportOptions choose what an export writes.
type ExportOptions struct {
	// CompleteGroupsOnly writes only what a trainer may use: completed
	// rollouts, and of a dataset's only those of complete groups. The
	// others are counted in ExportStats.Excluded.
	CompleteGroupsOnly bool
}

// groupDescriber is the describe part of client.Client: a ledger's search
// attributes and memo.
type groupDescriber interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// groupCache reads each group's ledger once per export: every line of a
// group then says the same, and an export of N rollouts in groups of k
// describes N/k ledgers. It holds one small entry per group.
type groupCache struct {
	src    groupDescriber
	set    string
	mu     sync.Mutex
	groups map[string]*ExportGroup
}

func newGroupCache(src groupDescriber, set string) *groupCache {
	return &groupCache{src: src, set: set, groups: map[string]*ExportGroup{}}
}

// status is the group's state, read at its first use in this export.
func (c *groupCache) status(ctx context.Context, group string) (*ExportGroup, error) {
	c.mu.Lock()
	g, ok := c.groups[group]
	c.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := describeGroup(ctx, c.src, c.set, group)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.groups[group]; ok {
		return prev, nil // read concurrently: the first answer stands
	}
	c.groups[group] = g
	return g, nil
}

// describeGroup reads a group's status from its ledger's search attribute
// and memo: no worker needed.
func describeGroup(ctx context.Context, src groupDescriber, set, group string) (*ExportGroup, error) {
	resp, err := src.DescribeWorkflowExecution(ctx, rollout.GroupWorkflowID(set, group), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &ExportGroup{Status: GroupUnknown, Reason: "the group has no ledger (submitted before groups had one)"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe the ledger of group %s: %w", group, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	status, ok := rollout.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutGroupStatus)
	if !ok {
		status = string(rollout.GroupRunning) // started, its first status not yet published
	}
	g := &ExportGroup{Status: status}
	memo := info.GetMemo()
	memoValue(memo, rollout.MemoGroupSize, &g.Size)
	memoValue(memo, rollout.MemoGroupRetries, &g.Retries)
	memoValue(memo, rollout.MemoGroupBudget, &g.RetryBudget)
	memoValue(memo, rollout.MemoGroupReason, &g.Reason)
	return g, nil
}

// memoValue decodes a memo field into ptr, leaving it as it is when the
// field is missing or undecodable.
func memoValue(memo *commonpb.Memo, key string, ptr any) {
	if p, ok := memo.GetFields()[key]; ok && p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, ptr)
	}
}

// trainable says whether line belongs in a trainer's view: a completed
// rollout, outside a group or in a complete one.
func trainable(line ExportLine) bool {
	return line.Status == "completed" && (line.GroupStatus == nil || line.GroupStatus.Status == string(rollout.GroupComplete))
}
