package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/activities/model"
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

// prefixInput is rollout i of the set. Each rollout counts to its own
// target, so no two of them hold the same conversation: the policy
// server's request records name a generation by its rendered chat, and a
// cut request is paired with the next request of its own generation.
func prefixInput(t *testing.T, i int) rollout.Input {
	in := setInput(t, prefixSet, []string{"counter"}, i)
	in.Task = json.RawMessage(fmt.Sprintf(`{"target":%d}`, 3+i))
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
// times right after a durable prefix was written (prefixKillPoints), with
// the worker's TURNSTILE_MODEL_PREFIX_BOUND set to bound, and returns the
// results, the policy server's request records and the largest history of
// one turn (bytes).
func prefixRun(t *testing.T, ctx context.Context, sz prefixSizes, kills int, bound string) (map[string]rollout.Result, policy.Stats, int) {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--tokens-per-second", strconv.Itoa(sz.tps), "--pad-tokens", strconv.Itoa(sz.pad))
	prefixEnv := []string{"TURNSTILE_MODEL_PREFIX_TOKENS=" + strconv.Itoa(sz.interval), model.EnvModelPrefixBound + "=" + bound}
	armed := func(k int) []string {
		return append([]string{failpoint.EnvVar + "=" + prefixKillPoints[k%len(prefixKillPoints)] + "=kill@3"}, prefixEnv...)
	}
	var w *proc
	if kills > 0 {
		w = c.startWorker(armed(0)...)
	} else {
		c.startWorker(prefixEnv...)
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
			w = c.startWorker(armed(k + 1)...)
		} else {
			c.startWorker(prefixEnv...)
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
// uninterrupted with each answer in one request, then with its worker in
// bounded generation (TURNSTILE_MODEL_PREFIX_BOUND=strict) SIGKILLed
// mid-generation several times, right after a durable prefix was
// heartbeated or between its write and its heartbeat. Every rollout ends
// at the same transcript head (so its generation records, token ids and
// log-probs included, are byte-identical: chunked answers are the
// unchunked ones) and cut calls resumed from their prefixes. By the policy
// server's count (it counts what it generates per request), no cut call
// made it generate more than one prefix interval again: in bounded mode
// no request asks for more than one interval beyond a durable prefix,
// whichever call the kill cuts and wherever in its interval.
// TURNSTILE_PREFIX_LONG=1 runs the sizes.
func TestPrefixRecoveryKill(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	sz := prefixSizesFor()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	base, baseStats, baseTurn := prefixRun(t, ctx, sz, 0, model.PrefixBoundOff)
	keys := map[string]bool{}
	for _, r := range baseStats.Requests {
		require.False(t, keys[r.Key], "two answers of the set share a conversation (%s): cut requests could not be paired", r.Key)
		keys[r.Key] = true
	}
	t.Logf("uninterrupted, unbounded: %d rollouts, %d tokens generated in %d requests (one per answer), at most %d history bytes per turn, in %s",
		len(base), baseStats.GeneratedTokens, len(baseStats.Requests), baseTurn, time.Since(start).Round(time.Second))
	start = time.Now()
	got, stats, gotTurn := prefixRun(t, ctx, sz, sz.kills, model.PrefixBoundStrict)
	regen := regeneratedAfterCuts(stats)
	t.Logf("bounded, worker killed %d times: %d tokens generated (%+d) in %d requests (%.1f per answer), regenerated after each cut: %v, at most %d history bytes per turn, in %s",
		sz.kills, stats.GeneratedTokens, stats.GeneratedTokens-baseStats.GeneratedTokens, len(stats.Requests), float64(len(stats.Requests))/float64(max(len(baseStats.Requests), 1)), regen, gotTurn, time.Since(start).Round(time.Second))
	// History per turn (model call plus environment operations) is logged,
	// not bounded here: no token goes into history, and chunks add no
	// event.

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
	for i, n := range regen {
		require.LessOrEqual(t, n, sz.interval, "cut %d of %v: a bounded call regenerates at most one prefix interval (%d tokens)", i, regen, sz.interval)
	}
	for _, r := range stats.Requests {
		require.LessOrEqual(t, r.Generated, sz.interval, "request %d (%s, from token %d): a bounded request generates at most one interval", r.Seq, r.Route, r.Start)
	}
}
