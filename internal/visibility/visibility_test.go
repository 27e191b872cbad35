package visibility

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestListSetPagesThroughAll(t *testing.T) {
	one := []*workflowpb.WorkflowExecutionInfo{{}}
	l := &temporalfake.Client{Pages: [][]*workflowpb.WorkflowExecutionInfo{one, one, one}}
	seen := 0
	err := ListSet(t.Context(), l, "s1", `ExecutionStatus = "Running"`, func(*workflowpb.WorkflowExecutionInfo) error {
		seen++
		return nil
	})
	require.NoError(t, err, "ListSet = %v after %d runs, want 3 runs", err, seen)
	require.Equal(t, 3, seen, "ListSet = %v after %d runs, want 3 runs", err, seen)
	want := `RolloutSet = "s1" AND ExecutionStatus = "Running"`
	assert.Equal(t, want, l.ListQueries()[0], "query")
}

func TestSearchAttributeDecoding(t *testing.T) {
	pl := temporalfake.Payload
	sa := &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
		rollout.SARolloutAttempt: pl(int64(2)), rollout.SARolloutPhase: pl("parked"), rollout.SARolloutTurn: pl("not a number"),
	}}
	tests := []struct {
		name   string
		decode func() (any, bool)
		want   any
		wantOK bool
	}{
		{"int", func() (any, bool) { return SAInt(sa, rollout.SARolloutAttempt) }, int64(2), true},
		{"keyword", func() (any, bool) { return SAKeyword(sa, rollout.SARolloutPhase) }, "parked", true},
		{"missing", func() (any, bool) { return SAKeyword(sa, rollout.SARolloutID) }, "", false},
		{"wrong type", func() (any, bool) { return SAInt(sa, rollout.SARolloutTurn) }, int64(0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.decode()
			require.Equal(t, tt.wantOK, ok, "got %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			if ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}
