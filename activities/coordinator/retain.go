package coordinator

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Metrics of checkpoint retention, per set.
const (
	RetentionFreedBytesMetric = "turnstile_checkpoint_retention_freed_bytes"
	RetentionDeletedMetric    = "turnstile_checkpoint_retention_deleted"
	RetentionKeptBytesMetric  = "turnstile_checkpoint_retention_kept_bytes"
)

// RetainCheckpoints records a committed checkpoint's tag and applies the
// set's retention under its root (package retention): the newest Keep
// committed checkpoints of the set and every pinned one stay; the others
// are deleted, aggregate manifest first. Retried, it deletes nothing more.
func (c *Coordinator) RetainCheckpoints(ctx context.Context, in checkpoint.RetainCheckpointsInput) (checkpoint.RetainCheckpointsResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.RetainCheckpointsResult{}, rollout.BadInput("%v", err)
	}
	if in.Keep < 0 {
		return checkpoint.RetainCheckpointsResult{}, rollout.BadInput("keep %d: want 0 (no retention) or more", in.Keep)
	}
	if _, err := c.checkDir(ctx, in.Root, in.CheckpointID); err != nil {
		return checkpoint.RetainCheckpointsResult{}, err
	}
	root, err := c.Storage.Open(ctx, in.Root)
	if err != nil {
		return checkpoint.RetainCheckpointsResult{}, rollout.BadInput("checkpoint root %s: %v", in.Root, err)
	}
	if in.Tag != "" {
		if err := retention.WriteTag(ctx, root, checkpoint.Tag{CheckpointID: in.CheckpointID, Set: in.Set, Tag: in.Tag}); err != nil {
			return checkpoint.RetainCheckpointsResult{}, err
		}
	}
	if in.Keep == 0 {
		return checkpoint.RetainCheckpointsResult{}, nil
	}
	res, err := retention.Apply(ctx, root, in.Set, in.Keep)
	if err != nil {
		return checkpoint.RetainCheckpointsResult{}, fmt.Errorf("retention of set %s under %s: %w", in.Set, in.Root, err)
	}
	out := checkpoint.RetainCheckpointsResult{KeptBytes: res.KeptBytes, FreedBytes: res.FreedBytes}
	for _, k := range res.Kept {
		out.Kept = append(out.Kept, k.ID)
	}
	for _, d := range res.Deleted {
		out.Deleted = append(out.Deleted, d.ID)
	}
	// Through the worker's SDK metrics handler (Prometheus, when the
	// worker serves metrics).
	m := activity.GetMetricsHandler(ctx).WithTags(map[string]string{"set": in.Set})
	m.Counter(RetentionFreedBytesMetric).Inc(out.FreedBytes)
	m.Counter(RetentionDeletedMetric).Inc(int64(len(out.Deleted)))
	m.Gauge(RetentionKeptBytesMetric).Update(float64(out.KeptBytes))
	activity.GetLogger(ctx).Info("checkpoint retention", "set", in.Set, "kept", out.Kept, "deleted", out.Deleted,
		"kept_bytes", out.KeptBytes, "freed_bytes", out.FreedBytes)
	return out, nil
}
