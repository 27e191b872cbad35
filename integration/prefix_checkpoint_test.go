package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestPrefixRecoveryCheckpoint: a checkpoint whose deadline falls while
// the set's answers are streaming, in bounded generation
// (TURNSTILE_MODEL_PREFIX_BOUND=strict), cuts model calls mid-generation;
// the parked rollouts keep their durable prefixes in the cut. Everything
// is SIGKILLed and the transcript store deleted, fresh processes restore
// the checkpoint, and every rollout ends at the uninterrupted, unbounded
// run's head (token ids and log-probs included), the cut calls continued
// from the prefixes the checkpoint carried, with at most one prefix
// interval generated again per cut and per request (the policy servers'
// counts): bounded, no request runs further than that past a durable
// prefix, however late the cut.
func TestPrefixRecoveryCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	sz := prefixSizesFor()
	if os.Getenv(envPrefixLong) == "" {
		sz.pad *= 3 // answers long enough for the deadline to fall inside them
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	base, _, _ := prefixRun(t, ctx, sz, 0, model.PrefixBoundOff)

	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	policyArgs := []string{"--tokens-per-second", strconv.Itoa(sz.tps), "--pad-tokens", strconv.Itoa(sz.pad)}
	c.startPolicyServer(policyArgs...)
	prefixEnv := []string{"TURNSTILE_MODEL_PREFIX_TOKENS=" + strconv.Itoa(sz.interval), model.EnvModelPrefixBound + "=" + model.PrefixBoundStrict}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.startWorker(append(prefixEnv, workers.EnvMetricsListen+"="+metricsAddr)...)
	for i := range sz.count {
		c.submit(ctx, prefixInput(t, i))
	}
	c.waitFor("an answer mid-generation", nil, 2*time.Minute, func() bool {
		for _, r := range policyStats(t, ctx, c.modelURL).Requests {
			// Bounded, a request generates one interval at most: the
			// generation is past two when its request started past one.
			if !r.Finished && r.Start+r.Generated >= 2*sz.interval {
				return true
			}
		}
		return false
	})
	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-pfx"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-pfx", Set: prefixSet, Root: root, Participants: []string{c.envURL}, Timeout: "3s",
		// Parked until everything is killed: no request after the cut.
		StayPaused: true,
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	t.Logf("checkpoint: %d members, %d parked, %d completed unacknowledged", cp.Members, cp.Parked, cp.CompletedUnacked)
	require.Positive(t, cp.Parked, "some rollouts parked mid-episode")
	before := policyStats(t, ctx, c.modelURL)
	cutAt := map[string]int{} // by generation key: where its last cut request ended
	for _, r := range before.Requests {
		if !r.Finished {
			cutAt[r.Key] = max(cutAt[r.Key], r.Start+r.Generated)
		}
	}
	require.NotEmpty(t, cutAt, "the deadline cut some generation")
	// The worker read all but the tokens in flight at the cuts; everything
	// it read of a cut call went into the prefix the cancellation reported.
	received := tokensReceived(t, "http://"+metricsAddr+"/metrics")
	t.Logf("the policy server sent %d tokens, the worker read %d: %d in flight at the cuts",
		before.GeneratedTokens, received, before.GeneratedTokens-received)
	require.LessOrEqual(t, received, before.GeneratedTokens)

	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer(policyArgs...)
	c.startWorker(prefixEnv...)
	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.RestoreWorkflowID("cp-pfx"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-pfx", Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	t.Logf("restore: %d restored from their boundary, %d started over, %d offered again", rs.Restored, rs.StartedOver, rs.OfferedAgain)
	got := c.acknowledgeAll(ctx, prefixSet, sz.count)
	after := policyStats(t, ctx, c.modelURL)
	c.killAll()

	resumed := 0
	for id, want := range base {
		r := got[id]
		require.Equal(t, want.Head, r.Head, "%s: the restored run's transcript (token ids and log-probs included) differs", id)
		for _, e := range r.Lineage {
			require.False(t, e.Regenerated, "%s: %s started over", id, e.CallID)
			if len(e.ResumedAt) > 0 {
				resumed++
			}
		}
	}
	require.Positive(t, resumed, "a cut call continued from the prefix the checkpoint carried")
	// The first request of each cut generation in the restored stack:
	// it continued from where the prefix the checkpoint carried ends.
	var lost []int
	continued := 0
	for _, r := range after.Requests {
		end, ok := cutAt[r.Key]
		if !ok {
			continue
		}
		delete(cutAt, r.Key)
		if r.Start > 0 {
			continued++
		}
		n := max(end-r.Start, 0)
		lost = append(lost, n)
		require.LessOrEqual(t, n, sz.interval, "a cut generation lost %d tokens, more than one prefix interval", n)
	}
	t.Logf("tokens generated again per cut generation: %v (%d continued from their prefix)", lost, continued)
	require.Positive(t, continued, "the restored policy server continued a prefix")
	for _, stats := range []policy.Stats{before, after} {
		for _, r := range stats.Requests {
			require.LessOrEqual(t, r.Generated, sz.interval, "request %d (%s, from token %d): a bounded request generates at most one interval", r.Seq, r.Route, r.Start)
		}
	}
}

// tokensReceived is the worker's turnstile_model_tokens_received_total.
func tokensReceived(t *testing.T, url string) int64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, url), "\n") {
		if v, ok := strings.CutPrefix(line, "turnstile_model_tokens_received_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return int64(f)
		}
	}
	require.Fail(t, "the worker exports no turnstile_model_tokens_received_total")
	return 0
}
