package rollout

// setupDetails starts the step rewards of a fresh start: they are kept from
// the first operation. A boundary carried over from a run that kept none (a
// checkpoint written before step rewards existed) stays without, so the
// rewards of earlier steps are never missing from a list said to be whole.
func (r *rollout) setupDetails() {
	if !r.b.Seeded && r.b.StepRewards == nil {
		r.b.StepRewards = []float64{}
	}
}

// recordStep appends an environment operation's reward, when the rollout
// keeps step rewards.
func (r *rollout) recordStep(reward float64) {
	if r.b.StepRewards != nil {
		r.b.StepRewards = append(r.b.StepRewards, reward)
	}
}

// withDetails adds what the run keeps beyond the reward to res: the step
// rewards and the verifier's details.
func (r *rollout) withDetails(res Result, v VerifyResult) Result {
	res.StepRewards, res.VerifyDetailsRef = r.b.StepRewards, v.DetailsRef
	return res
}
