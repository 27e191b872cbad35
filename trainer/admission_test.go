package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// TestSplitBatches: batches keep groups whole and stay within the rollout
// and byte bounds, in order.
func TestSplitBatches(t *testing.T) {
	req := validRequest()
	req.Count = 600
	in, err := BuildInputs(req)
	require.NoError(t, err)
	b, err := splitBatches(in)
	require.NoError(t, err)
	require.Equal(t, []int{256, 256, 88}, lens(b))
	require.Equal(t, in, concat(b), "order kept, nothing lost")

	rows := []DatasetRow{}
	for i := range 100 {
		rows = append(rows, DatasetRow{ID: fmt.Sprintf("q%d", i), Env: "counter", Task: []byte(`{"target":2}`)})
	}
	ds, err := BuildInputs(SubmitRequest{Set: "d1", Rows: rows, Repeats: 7})
	require.NoError(t, err)
	b, err = splitBatches(ds)
	require.NoError(t, err)
	for i, batch := range b {
		require.Zero(t, len(batch)%7, "batch %d of %d cuts a group", i, len(batch))
		require.LessOrEqual(t, len(batch), set.MaxBatchRollouts)
	}
	require.Equal(t, ds, concat(b))

	// A big task: the byte bound cuts batches smaller.
	big := make([]rollout.Input, 40)
	for i := range big {
		big[i] = rollout.Input{RolloutID: fmt.Sprint(i), Set: "s", Task: []byte(`"` + strings.Repeat("x", 100<<10) + `"`)}
	}
	b, err = splitBatches(big)
	require.NoError(t, err)
	for _, batch := range b {
		require.LessOrEqual(t, len(batch), 5, "5 tasks of 100 KiB fill 512 KiB")
	}
}

func lens(b [][]rollout.Input) []int {
	var out []int
	for _, x := range b {
		out = append(out, len(x))
	}
	return out
}

func concat(b [][]rollout.Input) []rollout.Input {
	var out []rollout.Input
	for _, x := range b {
		out = append(out, x...)
	}
	return out
}

// fakeAdmission is the admission as the submitter sees it: the batches it
// holds, its stamp, and how a batch may fail.
type fakeAdmission struct {
	mu       sync.Mutex
	exists   bool
	stamp    set.SubmitStamp
	received int
	starts   int
	failAt   int // batch whose update fails (-1: none)
}

func (f *fakeAdmission) client() *temporalfake.Client {
	apply := func(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		req := o.Args[0].(set.EnqueueRequest)
		switch {
		case req.Batch == f.failAt:
			return nil, errors.New("connection reset")
		case f.exists && req.Stamp != f.stamp:
			return temporalfake.UpdateHandle{Err: temporal.NewApplicationError("set s1 already exists, submitted by request r0", set.ErrSubmissionConflict)}, nil
		case req.Batch > f.received:
			return nil, fmt.Errorf("batch %d before batch %d", req.Batch, f.received)
		case req.Batch == f.received:
			f.received++
		}
		return temporalfake.UpdateHandle{Value: set.EnqueueResult{Received: f.received, Batches: req.Batches}}, nil
	}
	return &temporalfake.Client{
		Update: apply,
		UpdateWithStart: func(o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
			f.mu.Lock()
			op := o.StartWorkflowOperation.(*temporalfake.StartOperation)
			if !f.exists {
				f.exists, f.stamp = true, op.Args[0].(set.AdmissionInput).Stamp
				f.starts++
			}
			f.mu.Unlock()
			return apply(o.UpdateOptions)
		},
		Query: func(workflowID, _, queryType string, _ ...any) (converter.EncodedValue, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if !f.exists {
				return nil, serviceerror.NewNotFound("no such workflow")
			}
			return temporalfake.Value{V: set.AdmissionStatus{Set: "s1", Received: f.received}}, nil
		},
	}
}

// TestEnqueueResumesWhereItStopped: a submission cut short after two of
// four batches, made again, sends exactly the two others; the rollouts are
// counted as queued before and now, none twice.
func TestEnqueueResumesWhereItStopped(t *testing.T) {
	req := validRequest()
	req.Count = 1000
	req.RequestID = "sub-1"
	in, err := BuildInputs(req)
	require.NoError(t, err)
	stamp, err := req.admissionStamp()
	require.NoError(t, err)
	f := &fakeAdmission{failAt: 2}
	c := New(f.client(), "q")
	spec := enqueueSpec{set: "s1", inputs: in, stamp: stamp, maxInFlight: 8}
	sent, existing, err := c.enqueue(context.Background(), spec)
	require.ErrorContains(t, err, "queue batch 3 of 4")
	require.Equal(t, 512, sent)
	require.Zero(t, existing)
	require.Equal(t, 2, f.received)

	f.failAt = -1
	spec.resume = true
	before := len(c.tc.(*temporalfake.Client).Updates())
	sent, existing, err = c.enqueue(context.Background(), spec)
	require.NoError(t, err)
	require.Equal(t, 1000-512, sent)
	require.Equal(t, 512, existing)
	require.Equal(t, 4, f.received)
	require.Equal(t, 1, f.starts, "the admission is started once")
	var ids []string
	for _, u := range c.tc.(*temporalfake.Client).Updates()[before:] {
		ids = append(ids, u.UpdateID)
		assert.Equal(t, set.AdmissionWorkflowID("s1"), u.WorkflowID)
	}
	require.Equal(t, []string{"submit/sub-1/2", "submit/sub-1/3"}, ids,
		"a resumed submission sends from the first batch the admission lacks")
}

// TestEnqueueConflict: a batch of another request is a ConflictError
// naming the field at fault.
func TestEnqueueConflict(t *testing.T) {
	req := validRequest()
	in, err := BuildInputs(req)
	require.NoError(t, err)
	f := &fakeAdmission{exists: true, stamp: set.SubmitStamp{RequestID: "r0", Digest: "x"}, failAt: -1}
	c := New(f.client(), "q")
	_, _, err = c.enqueue(context.Background(), enqueueSpec{set: "s1", inputs: in, stamp: set.SubmitStamp{RequestID: "r1", Digest: "y"}, maxInFlight: 8})
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "request_id", ce.Field)
	require.Contains(t, ce.Msg, `submitted by request r0`)
}

// TestSameStamp: a set is completed only by the request that made it.
func TestSameStamp(t *testing.T) {
	mine := set.SubmitStamp{RequestID: "r1", Digest: "d"}
	require.NoError(t, sameStamp("s1", mine, mine))
	tests := []struct {
		have  set.SubmitStamp
		field string
		want  string
	}{
		{set.SubmitStamp{Digest: "d"}, "set", "submitted without a request id"},
		{set.SubmitStamp{RequestID: "r0", Digest: "d"}, "set", `submitted by request "r0"`},
		{set.SubmitStamp{RequestID: "r1", Digest: "e"}, "request_id", "with another body"},
	}
	for _, tt := range tests {
		err := sameStamp("s1", tt.have, mine)
		var ce *ConflictError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, tt.field, ce.Field)
		assert.Contains(t, ce.Msg, tt.want)
	}
}

// TestMaxInFlightIsNotDigested: the same request with another
// max_in_flight is the same submission (the limit may change while the set
// runs).
func TestMaxInFlightIsNotDigested(t *testing.T) {
	a, b := validRequest(), validRequest()
	a.RequestID, b.RequestID = "r", "r"
	b.MaxInFlight = 7
	sa, err := a.Stamp()
	require.NoError(t, err)
	sb, err := b.Stamp()
	require.NoError(t, err)
	require.Equal(t, sa, sb)
}

// TestHasAdmission: a set whose admission exists is known; NotFound is no
// admission; any other error is passed on.
func TestHasAdmission(t *testing.T) {
	var describeErr error
	fc := &temporalfake.Client{Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		require.Equal(t, set.AdmissionWorkflowID("s1"), workflowID)
		if describeErr != nil {
			return nil, describeErr
		}
		return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
	}}
	c := &Client{tc: fc}
	ok, err := c.HasAdmission(context.Background(), "s1")
	require.NoError(t, err)
	require.True(t, ok)

	describeErr = serviceerror.NewNotFound("no such workflow")
	ok, err = c.HasAdmission(context.Background(), "s1")
	require.NoError(t, err)
	require.False(t, ok)

	describeErr = errors.New("unavailable")
	_, err = c.HasAdmission(context.Background(), "s1")
	require.ErrorContains(t, err, `look up the admission of set "s1"`)

	_, err = c.HasAdmission(context.Background(), "bad set name!")
	require.Error(t, err)
}
