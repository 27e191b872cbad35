package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport/brokenparticipant"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestPrepareRefusesCapabilitiesItCannotWorkWith: a participant that
// lacks a feature the coordinator relies on (RULES.md R17), or reports
// another component, is refused before anything closes its admission,
// and the error names what it lacks.
func TestPrepareRefusesCapabilitiesItCannotWorkWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*protocol.Capabilities)
		want string
	}{
		{"only the feature checked before", func(c *protocol.Capabilities) { c.Features = []string{protocol.FeatureAbsoluteDeadline} },
			protocol.FeatureReceiptsInCheckpoint},
		{"another component", func(c *protocol.Capabilities) { c.Component = "env_server" }, `component "env_server"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorldWrapped(t, brokenparticipant.Capabilities(tc.edit))
			_, err := w.coord.PrepareParticipants(context.Background(), checkpoint.PrepareParticipantsInput{
				CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}, Deadline: time.Now().Add(time.Minute),
			})
			requireType(t, err, checkpoint.ErrParticipantRefused)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "R17")
			st := w.env.status(t)
			require.Equal(t, protocol.PhaseIdle, st.Phase)
			require.Equal(t, protocol.AdmissionOpen, st.Admission)
		})
	}
}

// TestPrepareSendsALeaseOnlyToParticipantsThatKnowLeases: lease_ms goes
// only to a participant that lists prepare_lease_v1 (RULES.md R28); an
// older one, whose strict decoder refuses an unknown field, is prepared
// without it and the checkpoint goes on.
func TestPrepareSendsALeaseOnlyToParticipantsThatKnowLeases(t *testing.T) {
	for _, knows := range []bool{true, false} {
		t.Run(fmt.Sprintf("knows leases %v", knows), func(t *testing.T) {
			var sent atomic.Bool
			strict := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/control/prepare" {
						body, _ := io.ReadAll(r.Body)
						var fields map[string]json.RawMessage
						require.NoError(t, json.Unmarshal(body, &fields))
						if _, ok := fields["lease_ms"]; ok {
							sent.Store(true)
							if !knows {
								http.Error(w, `{"error":{"code":"malformed_request","message":"unknown field \"lease_ms\""}}`, http.StatusBadRequest)
								return
							}
						}
						r.Body = io.NopCloser(bytes.NewReader(body))
					}
					next.ServeHTTP(w, r)
				})
			}
			withoutLeases := brokenparticipant.Capabilities(func(c *protocol.Capabilities) {
				if !knows {
					c.Features = slices.DeleteFunc(c.Features, func(f string) bool { return f == protocol.FeaturePrepareLease })
				}
			})
			w := newWorldWrapped(t, func(h http.Handler) http.Handler { return withoutLeases(strict(h)) })
			_, err := w.coord.PrepareParticipants(context.Background(), checkpoint.PrepareParticipantsInput{
				CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url},
				Deadline: time.Now().Add(time.Minute), Lease: 5 * time.Minute,
			})
			require.NoError(t, err)
			require.Equal(t, knows, sent.Load(), "lease_ms sent")
			require.Equal(t, protocol.PhasePrepared, w.env.status(t).Phase)
		})
	}
}
