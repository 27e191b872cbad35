package bookkeeping_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// A release batch sends each rollout its acknowledge update, with the id a
// direct acknowledgement has, and sorts the outcomes: accepted or closed
// (released), refused by the rollout (obsolete), no answer (failed).
func TestReleaseAcknowledged(t *testing.T) {
	rc := func(id string) rollout.Receipt {
		return rollout.Receipt{RolloutID: id, Attempt: 1, SHA256: strings.Repeat("c", 64)}
	}
	var (
		mu   sync.Mutex
		sent []client.UpdateWorkflowOptions
	)
	f := &temporalfake.Client{Update: func(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
		mu.Lock()
		sent = append(sent, o)
		mu.Unlock()
		switch o.WorkflowID {
		case "rollout/s1-closed":
			return nil, serviceerror.NewNotFound("workflow execution already completed")
		case "rollout/s1-replaced":
			return temporalfake.UpdateHandle{Err: temporal.NewApplicationError("rollout has no completed result to acknowledge", "")}, nil
		case "rollout/s1-down":
			return nil, serviceerror.NewUnavailable("connection refused")
		}
		return temporalfake.UpdateHandle{}, nil
	}}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(&bookkeeping.LedgerActivities{Client: f})
	in := set.ReleaseInput{Set: "s1", Receipts: []rollout.Receipt{rc("s1-a"), rc("s1-closed"), rc("s1-replaced"), rc("s1-down"), rc("s1-b")}}
	val, err := env.ExecuteActivity(set.ReleaseAcknowledgedName, in)
	require.NoError(t, err)
	var res set.ReleaseResult
	require.NoError(t, val.Get(&res))
	assert.Equal(t, set.ReleaseResult{Released: []string{"s1-a", "s1-b", "s1-closed"}, Obsolete: []string{"s1-replaced"}, Failed: []string{"s1-down"}}, res)
	require.Len(t, sent, 5)
	for _, o := range sent {
		id := strings.TrimPrefix(o.WorkflowID, "rollout/")
		assert.Equal(t, rollout.UpdateAcknowledge, o.UpdateName)
		assert.Equal(t, "ack/"+id+"/"+strings.Repeat("c", 64), o.UpdateID, "the update id of a direct acknowledgement")
		assert.Equal(t, rollout.AckRequest{Receipt: rc(id)}, o.Args[0])
		assert.Equal(t, client.WorkflowUpdateStageCompleted, o.WaitForStage)
	}

	bad := in
	bad.Receipts = []rollout.Receipt{{RolloutID: "s1-a", SHA256: "nope"}}
	_, err = env.ExecuteActivity(set.ReleaseAcknowledgedName, bad)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "err = %v", err)
	assert.Equal(t, rollout.ErrBadInput, ae.Type())
	assert.True(t, ae.NonRetryable())
}
