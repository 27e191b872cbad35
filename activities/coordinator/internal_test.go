package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/storage"
)

func TestRecordsRoundTripSortedAndDeterministic(t *testing.T) {
	ctx := context.Background()
	dir, err := storage.Dir(t.TempDir())
	require.NoError(t, err)
	recs := map[string][]byte{
		"b": []byte(`{"checkpoint_id":"c","set":"s","input":{"rollout_id":"b","set":"s"},"boundary":{"rollout_id":"b"}}`),
		"a": []byte(`{ "checkpoint_id":"c", "set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"a"}}`),
	}
	d1, err := writeRecords(ctx, at(dir, "r1.jsonl"), recs)
	require.NoError(t, err)
	d2, err := writeRecords(ctx, at(dir, "r2.jsonl"), recs)
	require.NoError(t, err, "same records, digests %s and %s (%v)", d1, d2, err)
	require.Equal(t, d2, d1, "same records, digests %s and %s (%v)", d1, d2, err)
	back, err := readRecords(ctx, at(dir, "r1.jsonl"))
	require.NoError(t, err, "read back %q, %v", back, err)
	require.Len(t, back, 2, "read back %q, %v", back, err)
	require.True(t, equalCompact(back["a"], recs["a"]), "read back %q, %v", back, err)
}

func equalCompact(a, b []byte) bool {
	strip := func(x []byte) string {
		out := make([]byte, 0, len(x))
		for _, c := range x {
			if c != ' ' {
				out = append(out, c)
			}
		}
		return string(out)
	}
	return strip(a) == strip(b)
}

// A fan-out whose calls all wait longer than the heartbeat timeout still
// heartbeats: the progress beats on a clock, not only per finished item.
func TestProgressBeatsWhileNothingFinishes(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// The activity sleeps on purpose; a loaded CI machine must not turn the
	// workflow goroutine's wait into a reported deadlock.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: time.Minute})
	var beats atomic.Int64
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats.Add(1) })
	slow := func(ctx context.Context) error {
		p := newProgress(ctx, "wait", 1)
		defer p.stop()
		// One item that takes four heartbeat timeouts. The timeout is a
		// second, not less: the clock beats every third of it, and on a
		// loaded CI machine a 100 ms timeout left too little slack (one late
		// beat failed the test with a heartbeat timeout).
		time.Sleep(4 * time.Second)
		p.add()
		return nil
	}
	env.RegisterActivityWithOptions(slow, activity.RegisterOptions{Name: "Slow"})
	env.ExecuteWorkflow(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, HeartbeatTimeout: time.Second})
		return workflow.ExecuteActivity(ctx, "Slow").Get(ctx, nil)
	})
	require.NoError(t, env.GetWorkflowError())
	// One beat at the start and one at the end; the clock adds about a
	// dozen (every 333 ms for 4 s).
	got := beats.Load()
	require.GreaterOrEqual(t, got, int64(4), "%d heartbeats in 4 s with a 1 s heartbeat timeout, want the clock's too", got)
}
