package trainer

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestSubmitStamp(t *testing.T) {
	r := validRequest()
	s, err := r.Stamp()
	require.NoError(t, err, "no request id: stamp %v, %v", s, err)
	require.Nil(t, s, "no request id: stamp %v, %v", s, err)
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
				i.Memo.Fields[MemoSubmit] = temporalfake.Payload(*tt.memo)
			}
			err := sameSubmission(context.Background(), &temporalfake.Client{Pages: [][]*workflowpb.WorkflowExecutionInfo{{i}}}, "s1", want)
			var ce *ConflictError
			require.Equal(t, tt.conflict, errors.As(err, &ce), "error %v, want conflict %v", err, tt.conflict)
			if !tt.conflict {
				require.NoError(t, err)
			}
		})
	}
}

// counts answers every count with err.
func counts(err error) *temporalfake.Client {
	return &temporalfake.Client{Count: func(string) (int64, error) { return 0, err }}
}

func TestHasProgressAttributes(t *testing.T) {
	ok := counts(nil)
	missing := counts(errors.New("invalid query: unknown search attribute RolloutProgressAt"))
	down := counts(errors.New("connection refused"))
	has, err := hasProgressAttributes(context.Background(), ok, "s1")
	assert.NoError(t, err, "registered")
	assert.True(t, has, "registered")
	has, err = hasProgressAttributes(context.Background(), missing, "s1")
	assert.NoError(t, err, "missing")
	assert.False(t, has, "missing")
	_, err = hasProgressAttributes(context.Background(), down, "s1")
	assert.Error(t, err, "an unreachable server passed for one without the attributes")
}

// A namespace without RolloutReceipt gets rollouts that name no stored
// result (an upsert of it would fail their workflow tasks).
func TestHasReceiptAttribute(t *testing.T) {
	ok := &temporalfake.Client{Count: func(q string) (int64, error) {
		assert.Contains(t, q, rollout.SARolloutReceipt+` = ""`)
		return 0, nil
	}}
	has, err := hasReceiptAttribute(context.Background(), ok, "s1")
	assert.NoError(t, err)
	assert.True(t, has, "registered")
	has, err = hasReceiptAttribute(context.Background(), counts(errors.New("invalid query: unknown search attribute RolloutReceipt")), "s1")
	assert.NoError(t, err)
	assert.False(t, has, "missing")
	_, err = hasReceiptAttribute(context.Background(), counts(errors.New("connection refused")), "s1")
	assert.Error(t, err, "an unreachable server passed for one without the attribute")
}
