package rollout

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

// TestEnvironmentFailure: a refusal and a lost session are the
// environment's (a group retries them); a model or network error is not.
func TestEnvironmentFailure(t *testing.T) {
	require.True(t, environmentFailure(temporal.NewNonRetryableApplicationError("409 revision_mismatch", ErrEnvironment, nil), nil))
	require.True(t, environmentFailure(temporal.NewApplicationError("404 unknown_session", ErrSessionLost), nil))
	require.False(t, environmentFailure(temporal.NewApplicationError("503", "ModelUnavailable"), nil))
	require.False(t, environmentFailure(errors.New("EOF"), nil))
}
