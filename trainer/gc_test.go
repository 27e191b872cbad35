package trainer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The mark asks a running rollout again when its query times out (its
// worker restarting, its queue busy), reads a run gone since the listing
// as not live, and stops, naming the run and the tries, only when the
// rollout stays silent for the whole QueryFor.
func TestGCQueryOfARolloutIsRetried(t *testing.T) {
	timeout := serviceerror.NewDeadlineExceeded("context deadline exceeded")
	for _, tc := range []struct {
		name     string
		answers  []error // one per try; nil: the status
		queryFor time.Duration
		live     bool
		tries    int
		wantErr  string
	}{
		{"answers at once", []error{nil}, time.Minute, true, 1, ""},
		{"answers after a timeout", []error{timeout, nil}, time.Minute, true, 2, ""},
		{"gone since the listing", []error{serviceerror.NewNotFound("workflow not found")}, time.Minute, false, 1, ""},
		{"silent for the whole time", []error{timeout, timeout, timeout}, 1500 * time.Millisecond, false, 2, "2 tries in 1.5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int32
			fake := &temporalfake.Client{Query: func(workflowID, runID, queryType string, _ ...any) (converter.EncodedValue, error) {
				require.Equal(t, rollout.QueryStatus, queryType)
				n := int(tries.Add(1)) - 1
				if err := tc.answers[min(n, len(tc.answers)-1)]; err != nil {
					return nil, err
				}
				return temporalfake.Value{V: rollout.Status{Phase: rollout.PhaseModel}}, nil
			}}
			st, live, err := New(fake, "q").queryRolloutStatus(context.Background(), "rollout/s-1", "run-1", tc.queryFor)
			require.Equal(t, tc.tries, int(tries.Load()))
			require.Equal(t, tc.live, live)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, "query rollout/s-1 (run run-1) for its transcript")
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorIs(t, err, timeout)
				return
			}
			require.NoError(t, err)
			if live {
				require.Equal(t, rollout.PhaseModel, st.Phase)
			}
		})
	}
}

func TestGCRequestQueryFor(t *testing.T) {
	require.Equal(t, DefaultGCQueryFor, GCRequest{}.queryFor())
	require.Equal(t, time.Second, GCRequest{QueryFor: time.Second}.queryFor())
	require.ErrorContains(t, GCRequest{Transcripts: "/tr", QueryFor: -time.Second}.validate(), "query-for -1s")
}
