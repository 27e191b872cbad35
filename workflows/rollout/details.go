package rollout

import "go.temporal.io/sdk/workflow"

// setupDetails records whether this run keeps step rewards and verify
// details. A fresh start keeps its step rewards from the first operation;
// a boundary carried over from a run that kept none (continue-as-new or a
// checkpoint from before the change) stays without, so the rewards of
// earlier steps are never missing from a list said to be whole.
func (r *rollout) setupDetails(ctx workflow.Context) {
	r.details = workflow.GetVersion(ctx, detailsChange, workflow.DefaultVersion, 1) >= 1
	if r.details && !r.b.Seeded && r.b.StepRewards == nil {
		r.b.StepRewards = []float64{}
	}
}

// recordStep appends an environment operation's reward, when the rollout
// keeps step rewards.
func (r *rollout) recordStep(reward float64) {
	if r.details && r.b.StepRewards != nil {
		r.b.StepRewards = append(r.b.StepRewards, reward)
	}
}

// withDetails adds what the run keeps beyond the reward to res: the step
// rewards and the verifier's details.
func (r *rollout) withDetails(res Result, v VerifyResult) Result {
	if r.details {
		res.StepRewards, res.VerifyDetailsRef = r.b.StepRewards, v.DetailsRef
	}
	return res
}
