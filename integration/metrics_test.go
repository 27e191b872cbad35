package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// Each process serves Prometheus metrics when given an address: the
// worker (the SDK's temporal_* and turnstile's own), the environment server
// and the policy server. One rollout runs, then every endpoint is scraped
// and the names the README lists are checked.
func TestMetricsEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	envAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	policyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	workerAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.startEnvServer("TURNSTILE_ENV_METRICS_LISTEN=" + envAddr)
	c.startPolicyServer("--metrics-listen", policyAddr)
	c.startWorker("TURNSTILE_METRICS_LISTEN=" + workerAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := c.submit(ctx, counterInput("metrics", 0, 3))
	c.results(ctx, []client.WorkflowRun{run})

	tests := []struct {
		name, addr string
		want       []string
	}{
		{"worker", workerAddr, []string{
			"temporal_worker_task_slots_available", "temporal_activity_execution_latency_seconds", "temporal_workflow_task_schedule_to_start_latency_seconds",
			`turnstile_turn_seconds_bucket{part="model"`, `turnstile_turn_seconds_bucket{part="environment"`, `turnstile_turn_seconds_bucket{part="orchestration"`,
			`turnstile_activity_seconds_count{activity="CallModel",outcome="ok"}`, "turnstile_transcript_reads_total", "turnstile_transcript_writes_total",
			"turnstile_transcript_read_bytes_total", "turnstile_transcript_write_bytes_total", "turnstile_rollouts", "go_goroutines",
		}},
		{"envserver", envAddr, []string{
			"turnstile_env_applied_total 5", "turnstile_env_replayed_total", "turnstile_env_refused_total", "turnstile_env_parked_total",
			"turnstile_env_sessions", `turnstile_env_request_seconds_count{code="2xx"`,
		}},
		{"policyserver", policyAddr, []string{`turnstile_policy_request_seconds_count{code="2xx",route="/v1/chat/completions"} 4`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := scrape(t, "http://"+tt.addr+"/metrics")
			for _, name := range tt.want {
				require.Contains(t, body, name, "%s metrics lack %s", tt.name, name)
			}
		})
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.ReplaceAll(string(data), "\r", "")
}
