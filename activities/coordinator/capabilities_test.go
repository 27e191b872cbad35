package coordinator_test

import (
	"context"
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
