package trainer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
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
// describes N/k ledgers, however many lines of one group are built at
// once (the first lookup describes, the others wait for it). It holds one
// small entry per group.
type groupCache struct {
	src    groupDescriber
	set    string
	mu     sync.Mutex
	groups map[string]*groupEntry
}

// groupEntry is one group's ledger, read once.
type groupEntry struct {
	done chan struct{} // closed once g or err is set
	g    *ExportGroup
	err  error
}

func newGroupCache(src groupDescriber, set string) *groupCache {
	return &groupCache{src: src, set: set, groups: map[string]*groupEntry{}}
}

// status is the group's state, read at its first use in this export. A
// failed read is not kept: the next line of the group tries again.
func (c *groupCache) status(ctx context.Context, group string) (*ExportGroup, error) {
	c.mu.Lock()
	e, ok := c.groups[group]
	if !ok {
		e = &groupEntry{done: make(chan struct{})}
		c.groups[group] = e
	}
	c.mu.Unlock()
	if ok {
		select {
		case <-e.done:
			if e.err == nil {
				return e.g, nil
			}
			return c.retry(ctx, group, e)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.g, e.err = describeGroup(ctx, c.src, c.set, group)
	close(e.done)
	return e.g, e.err
}

// retry forgets a failed read and reads the group again.
func (c *groupCache) retry(ctx context.Context, group string, failed *groupEntry) (*ExportGroup, error) {
	c.mu.Lock()
	if c.groups[group] == failed {
		delete(c.groups, group)
	}
	c.mu.Unlock()
	return c.status(ctx, group)
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
	status, ok := visibility.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutGroupStatus)
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
