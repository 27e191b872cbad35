package visibility

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// pagedLister serves pages of one execution each and records the queries.
type pagedLister struct {
	pages   int
	queries []string
}

func (l *pagedLister) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	l.queries = append(l.queries, req.GetQuery())
	n := len(l.queries)
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{{}}}
	if n < l.pages {
		resp.NextPageToken = []byte{byte(n)}
	}
	return resp, nil
}

func TestListSetPagesThroughAll(t *testing.T) {
	l := &pagedLister{pages: 3}
	seen := 0
	err := ListSet(t.Context(), l, "s1", `ExecutionStatus = "Running"`, func(*workflowpb.WorkflowExecutionInfo) error {
		seen++
		return nil
	})
	require.NoError(t, err, "ListSet = %v after %d runs, want 3 runs", err, seen)
	require.Equal(t, 3, seen, "ListSet = %v after %d runs, want 3 runs", err, seen)
	want := `RolloutSet = "s1" AND ExecutionStatus = "Running"`
	assert.Equal(t, want, l.queries[0], "query = %s, want %s", l.queries[0], want)
}

func TestSearchAttributeDecoding(t *testing.T) {
	pl := func(v any) *commonpb.Payload {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		return p
	}
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
			require.False(t, ok && got != tt.want, "got %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
		})
	}
}
