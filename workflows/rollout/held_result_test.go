package rollout_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRolloutNamesItsStoredHeldResult: a run asked to (ResultInStore)
// stores its result before it holds it, and names it in the same upsert as
// its phase awaiting_ack by the receipt's digest, which is the digest of
// what was stored; a run not asked stores nothing and names nothing; a run
// whose store failed holds its result unnamed (readers query it).
func TestRolloutNamesItsStoredHeldResult(t *testing.T) {
	receiptKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutReceipt)
	phaseKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase)
	for _, tc := range []struct {
		name         string
		asked, fails bool
	}{{"asked", true, false}, {"not asked", false, false}, {"store fails", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(2)
			env := newEnv(t, w)
			var stored [][]byte
			env.RegisterActivityWithOptions(func(_ context.Context, in rollout.StoreResultInput) error {
				if tc.fails {
					return temporal.NewNonRetryableApplicationError("store down", "StoreDown", errors.New("down"))
				}
				data, err := rollout.ResultJSON(in.Result)
				stored = append(stored, data)
				return err
			}, activity.RegisterOptions{Name: rollout.StoreResultName})
			named := map[string]string{} // phase -> receipt named with it
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				sa := args.Get(0).(temporal.SearchAttributes)
				if rc, ok := sa.GetKeyword(receiptKey); ok {
					p, _ := sa.GetKeyword(phaseKey)
					named[p] = rc
				}
			}).Return(nil)
			in := input(16)
			in.RequireAck, in.ResultInStore = true, tc.asked
			var held rollout.Receipt
			env.RegisterDelayedCallback(func() {
				v, err := env.QueryWorkflow(rollout.QueryStatus)
				require.NoError(t, err)
				var st rollout.Status
				require.NoError(t, v.Get(&st))
				require.Equal(t, rollout.PhaseAwaitingAck, st.Phase)
				held = *st.Result.Receipt
				env.UpdateWorkflow(rollout.UpdateAcknowledge, "ack", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) }, OnComplete: func(any, error) {},
				}, rollout.AckRequest{Receipt: held})
			}, time.Hour)
			env.ExecuteWorkflow(rollout.Rollout, in)
			result(t, env)

			if !tc.asked || tc.fails {
				assert.Empty(t, stored)
				assert.Empty(t, named, "no receipt named")
				return
			}
			require.Len(t, stored, 1)
			sum := sha256.Sum256(stored[0])
			assert.Equal(t, held.SHA256, hex.EncodeToString(sum[:]), "stored under the receipt's digest")
			assert.Equal(t, map[string]string{string(rollout.PhaseAwaitingAck): held.SHA256}, named)
		})
	}
}
