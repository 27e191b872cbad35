package rollout

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

func (r *rollout) setupUpsertDelta(ctx workflow.Context) {
	r.saDelta = workflow.GetVersion(ctx, upsertDeltaChange, workflow.DefaultVersion, 1) >= 1
}

// phaseUpdates are the identity, turn and phase attributes an upsert to
// phase p sends: all of them before the run's first upsert (or without
// upsertDeltaChange), else those that changed since the last one.
func (r *rollout) phaseUpdates(p Phase) []temporal.SearchAttributeUpdate {
	turn := rolloutTurnKey.ValueSet(int64(r.b.Turn))
	phase := rolloutPhaseKey.ValueSet(string(p))
	if !r.saDelta || !r.saSent {
		return []temporal.SearchAttributeUpdate{
			rolloutIDKey.ValueSet(r.in.RolloutID),
			rolloutSetKey.ValueSet(r.in.Set),
			rolloutAttemptKey.ValueSet(int64(r.in.Attempt)),
			turn, phase,
		}
	}
	var ups []temporal.SearchAttributeUpdate
	if r.b.Turn != r.saTurn {
		ups = append(ups, turn)
	}
	if p != r.saPhase {
		ups = append(ups, phase)
	}
	return ups
}
