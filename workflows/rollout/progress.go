package rollout

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

var (
	progressAtKey = temporal.NewSearchAttributeKeyTime(SARolloutProgressAt)
	finishedAtKey = temporal.NewSearchAttributeKeyTime(SARolloutFinishedAt)
)

// setupProgress decides, once per run, whether its phase upserts carry the
// progress attributes.
func (r *rollout) setupProgress(ctx workflow.Context) {
	if !r.in.ProgressAttributes {
		return
	}
	r.progress = workflow.GetVersion(ctx, progressChange, workflow.DefaultVersion, 1) >= 1
}

// progressUpdates are the attributes a phase upsert to p adds: the time of
// this change and, the first time the rollout holds, completes or fails, the
// time it finished (a later phase, such as completed after an
// acknowledgement, keeps the first).
func (r *rollout) progressUpdates(ctx workflow.Context, p Phase) []temporal.SearchAttributeUpdate {
	if !r.progress {
		return nil
	}
	now := workflow.Now(ctx).UTC()
	ups := []temporal.SearchAttributeUpdate{progressAtKey.ValueSet(now)}
	switch p {
	case PhaseAwaitingAck, PhaseCompleted, PhaseFailed:
		if !r.finishedAt {
			ups = append(ups, finishedAtKey.ValueSet(now))
		}
	}
	return ups
}
