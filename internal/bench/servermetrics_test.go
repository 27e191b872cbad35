package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promText is a dev server's /metrics after n workflow tasks, each
// waiting wait seconds to start, and n persistence calls of 2 ms.
func promText(n int, wait string) string {
	var b strings.Builder
	b.WriteString("# HELP persistence_latency Persistence latency\n# TYPE persistence_latency histogram\n")
	fmt.Fprintf(&b, "persistence_latency_sum{namespace=\"default\",operation=\"CreateTaskQueue\",service_name=\"matching\"} %g\n", 0.002*float64(n))
	fmt.Fprintf(&b, "persistence_latency_count{namespace=\"default\",operation=\"CreateTaskQueue\",service_name=\"matching\"} %d\n", n)
	fmt.Fprintf(&b, "service_latency_sum{namespace=\"default\",operation=\"StartWorkflowExecution\",service_name=\"frontend\"} %g\n", 0.010*float64(n))
	fmt.Fprintf(&b, "service_latency_count{namespace=\"default\",operation=\"StartWorkflowExecution\",service_name=\"frontend\"} %d\n", n)
	fmt.Fprintf(&b, "service_latency_count{namespace=\"default\",operation=\"StartWorkflowExecution\",service_name=\"history\"} %d\n", 7*n)
	for _, le := range []string{"0.001", "0.01", "0.1", "1", "+Inf"} {
		count := 0
		if le != "0.001" && le != "0.01" && (le != "0.1" || wait == "0.05") {
			count = n
		}
		fmt.Fprintf(&b, "task_schedule_to_start_latency_bucket{task_type=\"Workflow\",le=%q} %d\n", le, count)
		fmt.Fprintf(&b, "task_schedule_to_start_latency_bucket{task_type=\"Activity\",le=%q} %d\n", le, n)
	}
	fmt.Fprintf(&b, "service_latency_sum{namespace=\"default\",operation=\"ListWorkflowExecutions\",service_name=\"frontend\"} %g\n", 0.030*float64(n))
	fmt.Fprintf(&b, "service_latency_count{namespace=\"default\",operation=\"ListWorkflowExecutions\",service_name=\"frontend\"} %d\n", n)
	fmt.Fprintf(&b, "service_latency_sum{namespace=\"default\",operation=\"PollWorkflowTaskQueue\",service_name=\"frontend\"} %g\n", 60*float64(n))
	fmt.Fprintf(&b, "service_latency_count{namespace=\"default\",operation=\"PollWorkflowTaskQueue\",service_name=\"frontend\"} %d\n", n)
	fmt.Fprintf(&b, "poll_timeouts{task_type=\"Workflow\"} %d\nnot a sample line\n", n/2)
	return b.String()
}

func TestServerMetricsBetween(t *testing.T) {
	before, err := parseProm(strings.NewReader(promText(10, "0.5")))
	require.NoError(t, err)
	after, err := parseProm(strings.NewReader(promText(30, "0.5")))
	require.NoError(t, err)
	m := serverMetricsBetween("row", before, after)
	assert.Equal(t, "row", m.Row)
	assert.InDelta(t, 20, m.PersistenceOps, 1e-9)
	assert.InDelta(t, 2, m.PersistenceMeanMS, 1e-9)
	assert.InDelta(t, 10, m.StartMeanMS, 1e-9, "the frontend's starts only")
	assert.InDelta(t, 1000, m.WorkflowScheduleToStartP50MS, 1e-9, "every new workflow task in the bucket up to 1 s")
	assert.InDelta(t, 1000, m.WorkflowScheduleToStartP95MS, 1e-9)
	assert.InDelta(t, 1, m.ActivityScheduleToStartP95MS, 1e-9, "activity tasks in the first bucket")
	assert.InDelta(t, 10, m.PollTimeouts, 1e-9)
	assert.Zero(t, m.CompleteTaskMeanMS, "no RespondWorkflowTaskCompleted between the scrapes")
	require.Len(t, m.Frontend, 2, "the frontend's operations, long polls left out")
	assert.Equal(t, "ListWorkflowExecutions", m.Frontend[0].Operation, "the largest total first")
	assert.InDelta(t, 20, m.Frontend[0].Calls, 1e-9)
	assert.InDelta(t, 30, m.Frontend[0].MeanMS(), 1e-9)
	assert.Equal(t, "StartWorkflowExecution", m.Frontend[1].Operation)
}

func TestHistQuantileEmpty(t *testing.T) {
	assert.Zero(t, histQuantile(nil, nil, 0.5))
	same := map[float64]float64{0.1: 3}
	assert.Zero(t, histQuantile(same, same, 0.5), "nothing observed between the scrapes")
}

func TestWorkerProfileNamesDiffer(t *testing.T) {
	assert.NotEqual(t, WorkerProfileName(1), WorkerProfileName(2), "a restarted worker must not overwrite the first start's profile")
}
