package coordinator_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestCoordinatorSendsTheControlTokenOnlyToConfiguredParticipants: with
// only the world's environment server configured (by name), a checkpoint,
// a restore or a resume naming another participant is refused before
// anything is sent to any participant, naming the setting; so is a
// checkpoint root on an object store the worker was not configured with.
// An abort still resumes the configured participants and reports the
// other.
func TestCoordinatorSendsTheControlTokenOnlyToConfiguredParticipants(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer evil.Close()
	lookup := map[string]string{destination.EnvEnvServers: "a=" + w.env.url}
	dest, err := destination.FromLookup(func(k string) (string, bool) { v, ok := lookup[k]; return v, ok }, destination.Defaults{ControlToken: testToken})
	require.NoError(t, err)
	w.coord.Destinations = &dest
	refused := func(err error, setting string) {
		t.Helper()
		testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrDestinationRefused, NonRetryable: true, Contains: setting})
	}

	deadline := time.Now().Add(time.Minute)
	_, err = w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url, evil.URL}, Deadline: deadline})
	refused(err, destination.EnvAllowedParticipants)
	require.Equal(t, protocol.PhaseIdle, w.env.status(t).Phase, "the configured participant was not prepared either")

	_, err = w.coord.ResumeParticipants(ctx, checkpoint.ResumeParticipantsInput{CheckpointID: "ck1", Participants: []string{evil.URL}})
	refused(err, destination.EnvAllowedParticipants)
	_, err = w.coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{evil.URL}})
	refused(err, destination.EnvAllowedParticipants)

	_, err = w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{CheckpointID: "ck2", Set: "s1",
		Root: "s3://b/ck?endpoint=" + evil.URL + "&region=us-east-1", Participants: []string{w.env.url}, Deadline: deadline})
	refused(err, destination.EnvAllowedStoreEndpoints)

	res, err := w.coord.AbortCheckpoint(ctx, checkpoint.AbortCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{w.env.url, evil.URL}})
	require.ErrorContains(t, err, destination.EnvAllowedParticipants, "the refused participant is reported")
	require.Equal(t, 0, len(res.Unreachable))

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, seen, "the unconfigured participant heard nothing")
}
