package trainer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

// The chain a failed restore reaches the starter with, as the SDK builds
// it (its ActivityError and WorkflowExecutionError have no public
// constructors, so their messages are spelled out here as they print).
func TestCauseFirstPutsTheRootCauseFirst(t *testing.T) {
	rootMsg := "checkpoint k1: agents: invalid checkpoint: /ck/k1/agents: transcripts-00000.tar: listed in the manifest but missing"
	root := temporal.NewNonRetryableApplicationError(rootMsg, "CheckpointInvalid", nil)
	act := fmt.Errorf("activity error (type: ValidateCheckpoint, scheduledEventID: 5, startedEventID: 6, identity: 1@vm@): %w", root)
	step := fmt.Errorf("validate checkpoint: %w", act)
	outer := temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("restore of checkpoint k1 failed in phase validate: %v (nothing was touched)", step), "RestoreFailed", step)
	wf := fmt.Errorf("workflow execution error (type: Restore, workflowID: restore/k1, runID: r1, workflowTaskCompletedEventID: 9): %w", outer)

	got := causeFirst(wf)
	require.Equal(t, rootMsg+" (restore of checkpoint k1 failed in phase validate: validate checkpoint; nothing was touched)", got.Error())
	require.ErrorIs(t, got, root, "the whole chain stays reachable for --log-level debug")
	var cf *CauseFirstError
	require.True(t, errors.As(got, &cf))
	require.Equal(t, wf, cf.Err)
}

func TestCauseFirstLeavesOtherErrorsAlone(t *testing.T) {
	plain := errors.New("connection refused")
	require.Same(t, plain, causeFirst(plain))
	one := temporal.NewApplicationError("rollout r1: model endpoint said 400", "ModelBadRequest")
	require.Equal(t, "rollout r1: model endpoint said 400", causeFirst(fmt.Errorf("workflow execution error: %w", one)).Error())
}
