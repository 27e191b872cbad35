package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// TestPrefixWeightsChange: the worker is SIGKILLed mid-generation right
// after a durable prefix was heartbeated, and the policy server comes back
// with new weights (it reports version step-8 instead of step-7) before the
// call continues. The continued call keeps its prefix and records both
// versions: its export line names step-7 from token 0 and step-8 from the
// token where the continuation started, which is where it resumed; its
// policy_version stays the oldest, step-7, which staleness judges.
func TestPrefixWeightsChange(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sz := prefixSizesFor()
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	policyArgs := []string{"--tokens-per-second", strconv.Itoa(sz.tps), "--pad-tokens", strconv.Itoa(sz.pad)}
	policy := c.startPolicyServer(append(policyArgs, "--policy-version", "step-7")...)
	prefixEnv := "TURNSTILE_MODEL_PREFIX_TOKENS=" + strconv.Itoa(sz.interval)
	w := c.startWorker(prefixEnv, failpoint.EnvVar+"="+failpoint.WorkerModelPrefixHeartbeatBeforeNextChunk+"=kill@2")
	c.submit(ctx, prefixInput(t, 0))
	select {
	case <-w.done:
	case <-ctx.Done():
		require.Fail(t, "the armed worker never reached its failpoint")
	}
	require.ErrorContains(t, w.Err(), "killed", "the worker died by SIGKILL at its failpoint")

	// New weights: the policy server restarts at its address with another
	// version before any worker continues the call.
	policy.kill()
	c.startPolicyServer(append(policyArgs, "--policy-version", "step-8")...)
	c.startWorker(prefixEnv)
	c.acknowledgeAll(ctx, prefixSet, 1)

	file := filepath.Join(c.dir, "weights.jsonl")
	out, err := c.starter(ctx, "export", "--set", prefixSet, "--file", file, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	switched := switchedCalls(t, file)
	require.NotEmpty(t, switched, "a continued call records the versions that sampled it")
	for _, m := range switched {
		require.Len(t, m.Spans, 2, "%+v", m)
		require.Equal(t, transcript.VersionSpan{Start: 0, PolicyVersion: "step-7"}, m.Spans[0])
		require.Equal(t, "step-8", m.Spans[1].PolicyVersion)
		require.Positive(t, m.Spans[1].Start, "the prefix sampled by step-7 was kept")
		require.Contains(t, m.ResumedAt, m.Spans[1].Start, "the weights switch where the call continued from its prefix")
		require.Equal(t, "step-7", m.PolicyVersion, "the call's version is the oldest that sampled it, the one staleness judges")
	}
	t.Logf("versions of the continued calls: %+v", switched)
}

// versionedCall is what the test reads of an exported model message.
type versionedCall struct {
	PolicyVersion string                   `json:"policy_version"`
	Spans         []transcript.VersionSpan `json:"policy_version_spans"`
	ResumedAt     []int                    `json:"resumed_at"`
}

// switchedCalls reads an export file and returns its messages whose
// generation more than one policy version sampled.
func switchedCalls(t *testing.T, file string) []versionedCall {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var out []versionedCall
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line struct {
			Messages []versionedCall `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		for _, m := range line.Messages {
			if len(m.Spans) > 0 {
				out = append(out, m)
			}
		}
	}
	require.NoError(t, sc.Err())
	return out
}
