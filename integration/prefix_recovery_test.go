package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// envPrefixLong runs TestPrefixRecoveryKill at the sizes: ~50
// tokens/s and 2,000-token answers (minutes per run).
const envPrefixLong = "TURNSTILE_PREFIX_LONG"

// prefixSizes are the pace and length of the streamed answers, the prefix
// interval in tokens and the set's size.
type prefixSizes struct {
	tps, pad, interval, count, kills int
}

func prefixSizesFor() prefixSizes {
	if os.Getenv(envPrefixLong) != "" {
		return prefixSizes{tps: 50, pad: 2000, interval: 64, count: 4, kills: 3}
	}
	return prefixSizes{tps: 200, pad: 400, interval: 32, count: 4, kills: 3}
}

const prefixSet = "pfx"

func prefixInput(t *testing.T, i int) rollout.Input {
	in := setInput(t, prefixSet, []string{"counter"}, i)
	in.Sampling = &rollout.Sampling{CaptureTokens: true}
	in.Policy.ToolParser = rollout.ToolParserTurnstile
	in.RequireAck = true
	return in
}

// prefixKillPoints are where prefixRun's kills fall, in turn: right after
// a chunk's heartbeat was recorded (the SDK may not have sent it yet), and
// between a chunk's write and its heartbeat.
var prefixKillPoints = []string{failpoint.WorkerModelPrefixHeartbeatBeforeNextChunk, failpoint.WorkerModelPrefixWrittenBeforeHeartbeat}

// prefixRun runs the set on a fresh stack, its worker SIGKILLed kills
// times right after a durable prefix was written (prefixKillPoints), and
// returns the results, the policy server's request records and the largest
// history of one turn (bytes).
func prefixRun(t *testing.T, ctx context.Context, sz prefixSizes, kills int) (map[string]rollout.Result, policy.Stats, int) {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--tokens-per-second", strconv.Itoa(sz.tps), "--pad-tokens", strconv.Itoa(sz.pad))
	prefixEnv := "TURNSTILE_MODEL_PREFIX_TOKENS=" + strconv.Itoa(sz.interval)
	armed := func(k int) string {
		return failpoint.EnvVar + "=" + prefixKillPoints[k%len(prefixKillPoints)] + "=kill@3"
	}
	var w *proc
	if kills > 0 {
		w = c.startWorker(prefixEnv, armed(0))
	} else {
		c.startWorker(prefixEnv)
	}
	var runs []client.WorkflowRun
	for i := range sz.count {
		runs = append(runs, c.submit(ctx, prefixInput(t, i)))
	}
	for k := range kills {
		select {
		case <-w.done:
		case <-ctx.Done():
			require.Fail(t, "the armed worker never reached its failpoint", "kill %d", k+1)
		}
		require.ErrorContains(t, w.Err(), "killed", "kill %d: the worker died by SIGKILL at its failpoint", k+1)
		if k+1 < kills {
			w = c.startWorker(prefixEnv, armed(k+1))
		} else {
			c.startWorker(prefixEnv)
		}
	}
	res := c.acknowledgeAll(ctx, prefixSet, sz.count)
	stats := policyStats(t, ctx, c.modelURL)
	maxTurn := 0
	for _, run := range runs {
		perTurn, _ := turnBytes(t, ctx, c, run)
		for turn, n := range perTurn {
			if turn > 0 {
				maxTurn = max(maxTurn, n)
			}
		}
	}
	c.killAll()
	return res, stats, maxTurn
}

func policyStats(t *testing.T, ctx context.Context, modelURL string) policy.Stats {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(modelURL, "/v1")+policy.StatsPath, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var s policy.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

// regeneratedAfterCuts is, for each request the client cut, how many of
// its tokens the next request of the same generation produced again: the
// cut request ended at start+generated, the next one continued from its
// own start (0: it started over).
func regeneratedAfterCuts(s policy.Stats) []int {
	var out []int
	for i, r := range s.Requests {
		if r.Finished {
			continue
		}
		for _, next := range s.Requests[i+1:] {
			if next.Key == r.Key {
				out = append(out, max(r.Start+r.Generated-next.Start, 0))
				break
			}
		}
	}
	return out
}

// TestPrefixRecoveryKill: a set whose answers stream slowly is run
// uninterrupted, then with its worker SIGKILLed mid-generation several
// times, right after a durable prefix was heartbeated or between its write
// and its heartbeat. Every rollout ends at the same transcript head (so its
// generation records, token ids and log-probs included, are
// byte-identical) and cut calls resumed from their prefixes. The tokens the
// policy server (which counts what it generates per request) generated
// again after each cut are logged: the call at the failpoint had made
// every token it read durable (its retry finds it through the call's
// prefix index even when the heartbeat never got out), so it loses only
// the tokens in flight; the other calls the kill cut lose what they had
// read since their last flush too. TURNSTILE_PREFIX_LONG=1 runs the
// issue's sizes.
func TestPrefixRecoveryKill(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	sz := prefixSizesFor()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	base, baseStats, baseTurn := prefixRun(t, ctx, sz, 0)
	t.Logf("uninterrupted: %d rollouts, %d tokens generated, at most %d history bytes per turn, in %s",
		len(base), baseStats.GeneratedTokens, baseTurn, time.Since(start).Round(time.Second))
	start = time.Now()
	got, stats, gotTurn := prefixRun(t, ctx, sz, sz.kills)
	regen := regeneratedAfterCuts(stats)
	t.Logf("worker killed %d times: %d tokens generated (%+d), regenerated after each cut: %v, at most %d history bytes per turn, in %s",
		sz.kills, stats.GeneratedTokens, stats.GeneratedTokens-baseStats.GeneratedTokens, regen, gotTurn, time.Since(start).Round(time.Second))
	// History per turn (model call plus environment operations) is logged,
	// not bounded here: it is the same with and without kills, since no
	// token goes into history.

	require.Len(t, got, len(base))
	resumed := 0
	for id, want := range base {
		r := got[id]
		require.Equal(t, want.Head, r.Head, "%s: the recovered run's transcript (token ids and log-probs included) differs", id)
		require.Equal(t, want.Reward, r.Reward, "%s", id)
		for _, e := range r.Lineage {
			require.False(t, e.Regenerated, "%s: %s started over", id, e.CallID)
			if len(e.ResumedAt) > 0 {
				resumed++
			}
		}
	}
	require.GreaterOrEqual(t, resumed, 1, "some cut call resumed from its prefix")
	require.NotEmpty(t, regen, "the policy server saw cut requests")
	// Logged, not asserted: a kill cuts every call streaming on the
	// worker, not only the one at the failpoint. Each loses the tokens it
	// had read since its last flush (at most one interval) plus those in
	// flight, which depend on the machine's load, not on the worker.
	over := 0
	for _, n := range regen {
		if n > sz.interval {
			over++
		}
	}
	t.Logf("prefix interval %d tokens: %d of %d cuts regenerated more (a call the kill cut loses at most the interval it had read plus the tokens in flight)", sz.interval, over, len(regen))
}
