package trainer

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
)

func TestSubmitStamp(t *testing.T) {
	r := validRequest()
	if s, err := r.Stamp(); err != nil || s != nil {
		t.Fatalf("no request id: stamp %v, %v", s, err)
	}
	r.RequestID = "req-1"
	a, err := r.Stamp()
	require.NoError(t, err)
	b, _ := r.Stamp()
	r.Count++
	c, _ := r.Stamp()
	r.Count--
	r.RequestID = "req-2"
	d, _ := r.Stamp()
	require.Equal(t, *b, *a, "stamps %+v %+v %+v %+v: equal requests stamp alike, the request id is not in the digest", a, b, c, d)
	require.NotEqual(t, c.Digest, a.Digest, "stamps %+v %+v %+v %+v: equal requests stamp alike, the request id is not in the digest", a, b, c, d)
	require.Equal(t, a.Digest, d.Digest, "stamps %+v %+v %+v %+v: equal requests stamp alike, the request id is not in the digest", a, b, c, d)
	require.Equal(t, "req-2", d.RequestID, "stamps %+v %+v %+v %+v: equal requests stamp alike, the request id is not in the digest", a, b, c, d)
}

// TestSameSubmission: an existing set is the same submission only when its
// runs carry the same request id and digest.
func TestSameSubmission(t *testing.T) {
	want := SubmitStamp{RequestID: "req-1", Digest: "d1"}
	tests := []struct {
		name     string
		memo     *SubmitStamp
		conflict bool
	}{
		{"same", &SubmitStamp{RequestID: "req-1", Digest: "d1"}, false},
		{"other body", &SubmitStamp{RequestID: "req-1", Digest: "d2"}, true},
		{"other request", &SubmitStamp{RequestID: "req-0", Digest: "d1"}, true},
		{"no request id", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := info(t, "s1-0000", "r", running, t0, 0, "model")
			i.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{}}
			if tt.memo != nil {
				i.Memo.Fields[MemoSubmit] = payload(t, *tt.memo)
			}
			err := sameSubmission(context.Background(), &pagedLister{pages: [][]*workflowpb.WorkflowExecutionInfo{{i}}}, "s1", want)
			var ce *ConflictError
			require.Equal(t, errors.As(err, &ce), tt.conflict, "error %v, want conflict %v", err, tt.conflict)
			require.False(t, !tt.conflict && err != nil, "error %v, want conflict %v", err, tt.conflict)
		})
	}
}

type countFunc func(string) (*workflowservice.CountWorkflowExecutionsResponse, error)

func (f countFunc) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	return f(req.GetQuery())
}

func TestHasProgressAttributes(t *testing.T) {
	ok := countFunc(func(string) (*workflowservice.CountWorkflowExecutionsResponse, error) {
		return &workflowservice.CountWorkflowExecutionsResponse{}, nil
	})
	missing := countFunc(func(string) (*workflowservice.CountWorkflowExecutionsResponse, error) {
		return nil, errors.New("invalid query: unknown search attribute RolloutProgressAt")
	})
	down := countFunc(func(string) (*workflowservice.CountWorkflowExecutionsResponse, error) {
		return nil, errors.New("connection refused")
	})
	if has, err := hasProgressAttributes(context.Background(), ok, "s1"); !has || err != nil {
		t.Errorf("registered: %v, %v", has, err)
	}
	if has, err := hasProgressAttributes(context.Background(), missing, "s1"); has || err != nil {
		t.Errorf("missing: %v, %v", has, err)
	}
	_, err := hasProgressAttributes(context.Background(), down, "s1")
	assert.Error(t, err, "an unreachable server passed for one without the attributes")
}
