package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

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
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string][]byte{
		"b": []byte(`{"checkpoint_id":"c","set":"s","input":{"rollout_id":"b","set":"s"},"boundary":{"rollout_id":"b"}}`),
		"a": []byte(`{ "checkpoint_id":"c", "set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"a"}}`),
	}
	d1, err := writeRecords(ctx, at(dir, "r1.jsonl"), recs)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := writeRecords(ctx, at(dir, "r2.jsonl"), recs)
	if err != nil || d1 != d2 {
		t.Fatalf("same records, digests %s and %s (%v)", d1, d2, err)
	}
	back, err := readRecords(ctx, at(dir, "r1.jsonl"))
	if err != nil || len(back) != 2 || !equalCompact(back["a"], recs["a"]) {
		t.Fatalf("read back %q, %v", back, err)
	}
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
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	// One beat at the start and one at the end; the clock adds about a
	// dozen (every 333 ms for 4 s).
	if got := beats.Load(); got < 4 {
		t.Fatalf("%d heartbeats in 4 s with a 1 s heartbeat timeout, want the clock's too", got)
	}
}
