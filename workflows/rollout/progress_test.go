package rollout_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRolloutProgressAttributes: a run asked for them stamps every upsert
// while it works with RolloutProgressAt, and its first finished phase (here
// the held result) with RolloutFinishedAt instead, which the
// acknowledgement does not move; a run not asked upserts neither.
func TestRolloutProgressAttributes(t *testing.T) {
	progressAt := temporal.NewSearchAttributeKeyTime(rollout.SARolloutProgressAt)
	finishedAt := temporal.NewSearchAttributeKeyTime(rollout.SARolloutFinishedAt)
	phaseKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase)
	for _, asked := range []bool{true, false} {
		t.Run(map[bool]string{true: "asked", false: "not asked"}[asked], func(t *testing.T) {
			w := newWorld(2)
			env := newEnv(t, w)
			var upserts []temporal.SearchAttributes
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
			}).Return(nil)
			in := input(16)
			in.RequireAck, in.ProgressAttributes = true, asked
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(rollout.QueryStatus)
				require.NoError(t, err)
				var st rollout.Status
				require.NoError(t, v.Get(&st))
				require.Equal(t, rollout.PhaseAwaitingAck, st.Phase)
				env.UpdateWorkflow(rollout.UpdateAcknowledge, "ack", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) }, OnComplete: func(any, error) {},
				}, rollout.AckRequest{Receipt: *st.Result.Receipt})
			}, time.Hour)
			env.ExecuteWorkflow(rollout.Rollout, in)
			result(t, env)

			var progressed, finished []string
			for _, sa := range upserts {
				p, _ := sa.GetKeyword(phaseKey)
				if _, ok := sa.GetTime(progressAt); ok {
					progressed = append(progressed, p)
				}
				if _, ok := sa.GetTime(finishedAt); ok {
					finished = append(finished, p)
				}
			}
			if asked {
				require.Equal(t, []string{string(rollout.PhaseModel)}, progressed)
				require.Equal(t, []string{string(rollout.PhaseAwaitingAck)}, finished)
			} else {
				require.Empty(t, progressed)
				require.Empty(t, finished)
			}
		})
	}
}
