package model_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// StoreResult stores a held result under its receipt's digest (again: a
// no-op), and refuses a result whose receipt does not digest it.
func TestStoreResult(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	a := &model.Activities{Store: store}
	res := rollout.Result{RolloutID: "s1-r1", Set: "s1", Attempt: 2, Reward: 1, Turns: 3}
	rc, err := rollout.NewReceipt(res)
	require.NoError(t, err)
	res.Receipt = &rc
	for range 2 {
		require.NoError(t, a.StoreResult(t.Context(), rollout.StoreResultInput{Result: res}))
	}
	var got rollout.Result
	require.NoError(t, store.GetJSON(t.Context(), transcript.Digest("sha256:"+rc.SHA256), &got))
	want := res
	want.Receipt = nil
	require.Equal(t, want, got)

	bad := res
	bad.Reward = 0 // the receipt no longer digests it
	err = a.StoreResult(t.Context(), rollout.StoreResultInput{Result: bad})
	require.ErrorContains(t, err, "its receipt says sha256:"+rc.SHA256)

	res.Receipt = nil
	require.ErrorContains(t, a.StoreResult(t.Context(), rollout.StoreResultInput{Result: res}), "has no receipt")
}
