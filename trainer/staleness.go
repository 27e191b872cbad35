package trainer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Staleness control: an asynchronous trainer moves its policy on while
// rollouts sampled from older weights still run (TRL #7176, AReaL bound the
// lag). Every model call records the policy version it was sampled from
// (rollout.LineageEntry.PolicyVersion, from the endpoint or the set's
// rollout.PolicyRef.Version); the trainer names its current version as an
// integer, and a running rollout whose oldest call is more than MaxLag
// versions behind is stale.

// ParsePolicyVersion maps a recorded policy version to an integer: its
// trailing decimal digits ("42" → 42, "step-42" → 42, "v3" → 3,
// "ckpt_0007" → 7). ok is false for a version without trailing digits (an
// adapter name): such calls are never counted stale.
func ParsePolicyVersion(v string) (n int64, ok bool) {
	i := len(v)
	for i > 0 && v[i-1] >= '0' && v[i-1] <= '9' {
		i--
	}
	if i == len(v) || len(v)-i > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[i:], 10, 64)
	return n, err == nil
}

// StalenessRequest checks the running rollouts of Set against Version.
type StalenessRequest struct {
	Set     string
	Version int64
	MaxLag  int64
	// Cancel stale rollouts (their runs close as cancelled and appear in
	// the feed as such); otherwise they are only reported.
	Cancel bool
}

// StaleRollout is a running rollout sampled more than MaxLag versions ago.
type StaleRollout struct {
	RolloutID     string `json:"rollout_id"`
	OldestVersion int64  `json:"oldest_version"`
	Lag           int64  `json:"lag"`
}

// StalenessResult counts the running rollouts checked and the stale ones
// (Cancelled of them cancelled by this call), listed by rollout id.
type StalenessResult struct {
	Checked   int
	Cancelled int
	Stale     []StaleRollout
}

// stalenessWindow is how many running rollouts are queried at once: only
// their lineages are in memory, and the stale ones' ids.
const stalenessWindow = 64

// Staleness checks every running rollout of r.Set that does not hold a
// result yet (held results are the trainer's to judge) by its status
// query, and cancels the stale ones when r.Cancel. Cancelling again is
// harmless: a rollout already cancelled is no longer running.
func (c *Client) Staleness(ctx context.Context, r StalenessRequest) (StalenessResult, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return StalenessResult{}, err
	}
	if r.Version < 0 || r.MaxLag < 0 {
		return StalenessResult{}, fmt.Errorf("version %d, max lag %d: want non-negative", r.Version, r.MaxLag)
	}
	return staleness(ctx, stalenessTarget{q: c.tc, cancel: c.tc.CancelWorkflow}, c.tc, r)
}

// stalenessTarget queries and cancels rollouts.
type stalenessTarget struct {
	q      statusQuerier
	cancel func(ctx context.Context, workflowID, runID string) error
}

func staleness(ctx context.Context, t stalenessTarget, l visibility.Lister, r StalenessRequest) (StalenessResult, error) {
	var res StalenessResult
	window := make([]*workflowpb.WorkflowExecutionInfo, 0, stalenessWindow)
	flush := func() error {
		err := checkWindow(ctx, t, r, window, &res)
		window = window[:0]
		return err
	}
	filter := fmt.Sprintf(`ExecutionStatus = "Running" AND %s != %q`, rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
	err := visibility.ListSet(ctx, l, r.Set, filter, func(info *workflowpb.WorkflowExecutionInfo) error {
		if window = append(window, info); len(window) < stalenessWindow {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	sort.Slice(res.Stale, func(i, j int) bool { return res.Stale[i].RolloutID < res.Stale[j].RolloutID })
	return res, err
}

// checkWindow queries a window of running rollouts and cancels the stale.
func checkWindow(ctx context.Context, t stalenessTarget, r StalenessRequest, infos []*workflowpb.WorkflowExecutionInfo, res *StalenessResult) error {
	stale := make([]*StaleRollout, len(infos))
	cancelled := make([]bool, len(infos))
	err := fanout.Each(ctx, len(infos), updateConcurrency, func(ctx context.Context, i int) error {
		ex := infos[i].GetExecution()
		st, err := queryStatus(ctx, t.q, ex.GetWorkflowId())
		if err != nil {
			return err
		}
		oldest, ok := oldestVersion(st.Boundary.Lineage)
		if !ok || r.Version-oldest <= r.MaxLag {
			return nil
		}
		stale[i] = &StaleRollout{RolloutID: PositionOf(infos[i]).RolloutID, OldestVersion: oldest, Lag: r.Version - oldest}
		if !r.Cancel {
			return nil
		}
		err = t.cancel(ctx, ex.GetWorkflowId(), ex.GetRunId())
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			cancelled[i] = true
		case errors.As(err, &notFound):
		default:
			return fmt.Errorf("cancel stale rollout %s: %w", ex.GetWorkflowId(), err)
		}
		return nil
	})
	res.Checked += len(infos)
	for i, s := range stale {
		if s != nil {
			res.Stale = append(res.Stale, *s)
		}
		if cancelled[i] {
			res.Cancelled++
		}
	}
	return err
}

// oldestVersion is the lowest version among a lineage's calls; ok is false
// when no call recorded a version with an integer.
func oldestVersion(lineage []rollout.LineageEntry) (oldest int64, ok bool) {
	for _, e := range lineage {
		if v, vok := ParsePolicyVersion(e.PolicyVersion); vok && (!ok || v < oldest) {
			oldest, ok = v, true
		}
	}
	return oldest, ok
}
