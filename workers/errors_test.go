package workers

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

func TestUnwrapApplicationError(t *testing.T) {
	refusal := temporal.NewNonRetryableApplicationError("participant refused", "ParticipantRefused", nil)
	wrapped := fmt.Errorf("commit checkpoint k1: %w", refusal)

	got := unwrapApplicationError(wrapped)
	var app *temporal.ApplicationError
	require.True(t, errors.As(got, &app))
	require.Same(t, app, got, "the outermost error is the application error Temporal classifies")
	require.Equal(t, "ParticipantRefused", app.Type())
	require.True(t, app.NonRetryable(), "a wrapped non-retryable refusal stays non-retryable")
	require.Contains(t, got.Error(), "commit checkpoint k1: participant refused")

	delayed := temporal.NewApplicationErrorWithOptions("busy", "ModelUnavailable", temporal.ApplicationErrorOptions{NextRetryDelay: 3 * time.Second})
	got = unwrapApplicationError(fmt.Errorf("model: %w", delayed))
	require.True(t, errors.As(got, &app))
	require.False(t, app.NonRetryable())
	require.Equal(t, 3*time.Second, app.NextRetryDelay())

	plain := errors.New("connection reset")
	require.Same(t, plain, unwrapApplicationError(plain), "an error wrapping no application error is left alone")
	require.Same(t, refusal, unwrapApplicationError(refusal))
	require.NoError(t, unwrapApplicationError(nil))
}
