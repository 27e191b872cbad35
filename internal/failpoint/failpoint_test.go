package failpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		wantErr string
	}{
		{spec: ""},
		{spec: failpoint.WorkerEnvAppliedBeforeReport + "=kill@3"},
		{spec: failpoint.EnvAfterApplyBeforeReply + "=kill, " + failpoint.RestoreAfterValidate + "=kill@2"},
		{spec: "nope=kill@1", wantErr: "unknown name"},
		{spec: failpoint.CheckpointBetweenFiles + "=panic@1", wantErr: "unknown action"},
		{spec: failpoint.CheckpointBetweenFiles + "=kill@0", wantErr: "bad count"},
		{spec: failpoint.CheckpointBetweenFiles, wantErr: "want name=kill@N"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := failpoint.Parse(tt.spec)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestHitFiresOnTheNthPassOnly(t *testing.T) {
	s, err := failpoint.Parse(failpoint.WorkerEnvAppliedBeforeReport + "=kill@3")
	require.NoError(t, err)
	fired := 0
	s.SetKill(func() { fired++ })
	for range 5 {
		s.Hit(failpoint.WorkerEnvAppliedBeforeReport)
		s.Hit(failpoint.WorkerModelAnsweredBeforeReport) // not armed
	}
	require.Equal(t, 1, fired)
}

func TestUnarmedIsANoOp(t *testing.T) {
	var s *failpoint.Set
	s.Hit(failpoint.EnvAfterApplyBeforeReply) // must not panic
	empty, err := failpoint.Parse("")
	require.NoError(t, err)
	empty.Hit(failpoint.EnvAfterApplyBeforeReply)
}

func TestAllNamesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range failpoint.All {
		require.False(t, seen[n], n)
		seen[n] = true
	}
}

func BenchmarkHitUnarmed(b *testing.B) {
	s, _ := failpoint.Parse(failpoint.RestoreAfterValidate + "=kill@1")
	for b.Loop() {
		s.Hit(failpoint.WorkerEnvAppliedBeforeReport)
	}
}
