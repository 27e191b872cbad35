package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// nativeInput is the JSON a pipeline that speaks Temporal sends to start a
// rollout, written out as the README's "Temporal-native route" shows it, so
// the test checks the documented form and not a Go struct's encoding.
const nativeInput = `{"rollout_id":"%s","set":"native","task":{"target":%d},"env":{"name":"counter"},` +
	`"policy":{"model":"scripted-counter"},"seed":%d,"limits":{"max_turns":16},"require_ack":true}`

// TestTemporalNativeRoute drives rollouts with nothing but the Temporal CLI,
// the way any Temporal SDK would: start `Rollout` by name with JSON input,
// list the set with a visibility query, query `status` and `boundary`, and
// release each held result with the `acknowledge` update. A wrong receipt is
// refused without changing anything; a repeated update id gets the same
// answer; a repeated start, before or after the rollout completed, starts no
// second run (with --id-reuse-policy RejectDuplicate, as the README says).
func TestTemporalNativeRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const count = 3
	ids := make([]string, count)
	runs := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("native-%04d", i)
		started := c.nativeStart(ctx, ids[i], fmt.Sprintf(nativeInput, ids[i], 2+i, 40+i))
		require.Equal(t, rollout.WorkflowID(ids[i]), started.WorkflowID)
		require.Equal(t, rollout.WorkflowName, started.Type)
		runs[i] = started.RunID
	}
	// A pipeline that re-sends a start (it timed out, it restarted) starts
	// nothing: the CLI, like the SDKs' default, answers with the run there is.
	again := c.nativeStart(ctx, ids[0], fmt.Sprintf(nativeInput, ids[0], 2, 40))
	require.Equal(t, runs[0], again.RunID, "a repeated start must not start a second run")

	held := `RolloutSet="native" AND RolloutPhase="awaiting_ack" AND ExecutionStatus="Running"`
	c.waitFor("every native rollout holding its result", nil, 2*time.Minute, func() bool {
		return len(c.cliList(ctx, held)) == count
	})

	for i, id := range ids {
		st := c.nativeStatus(ctx, id)
		require.Equal(t, rollout.PhaseAwaitingAck, st.Phase, id)
		require.NotNil(t, st.Result, "%s: a held rollout's status carries its result", id)
		require.NotNil(t, st.Result.Receipt, id)
		require.Equal(t, 1.0, st.Result.Reward, "%s reaches its target", id)
		require.Equal(t, "native", st.Result.Set)

		var q struct {
			QueryResult []rollout.Boundary `json:"queryResult"`
		}
		c.cliJSON(ctx, &q, "workflow", "query", "--workflow-id", rollout.WorkflowID(id), "--name", rollout.QueryBoundary)
		require.Len(t, q.QueryResult, 1)
		b := q.QueryResult[0]
		require.True(t, b.Done, "%s: boundary after the last turn", id)
		require.Equal(t, st.Result.Turns, b.Turn)
		require.Equal(t, st.Result.Head, b.Head)
		require.Equal(t, int64(2+i), b.Revision, "%s: one increment per step to its target", id)

		c.nativeAcknowledge(ctx, id, *st.Result.Receipt)
	}

	done := `RolloutSet="native" AND ExecutionStatus="Completed"`
	c.waitFor("every native rollout completed", nil, time.Minute, func() bool { return len(c.cliList(ctx, done)) == count })
	require.Empty(t, c.cliList(ctx, held), "nothing is held after the acknowledgements")

	again = c.nativeStart(ctx, ids[0], fmt.Sprintf(nativeInput, ids[0], 2, 40))
	require.Equal(t, runs[0], again.RunID, "a start after completion must not run the rollout again")
	require.Len(t, c.cliList(ctx, fmt.Sprintf("WorkflowId=%q", rollout.WorkflowID(ids[0]))), 1, "one run of the rollout")
}

// nativeStarted is what `temporal workflow start -o json` prints.
type nativeStarted struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	Type       string `json:"type"`
}

// nativeStart starts rollout id with input, as the README shows it.
func (c *cluster) nativeStart(ctx context.Context, id, input string) nativeStarted {
	c.t.Helper()
	var started nativeStarted
	c.cliJSON(ctx, &started, "workflow", "start", "--type", rollout.WorkflowName, "--task-queue", rollout.TaskQueue,
		"--workflow-id", rollout.WorkflowID(id), "--id-reuse-policy", "RejectDuplicate",
		"--search-attribute", `RolloutSet="native"`, "--input", input)
	return started
}

// nativeAcknowledge sends the acknowledge update for id three ways: with a
// wrong receipt (refused, the result stays held), with the right one, and
// with the right one again under the same update id, which, the run having
// completed, answers as the first time did.
func (c *cluster) nativeAcknowledge(ctx context.Context, id string, receipt rollout.Receipt) {
	c.t.Helper()
	wrong := receipt
	wrong.SHA256 = strings.Repeat("0", 64)
	out, err := c.temporalCLI(ctx, "workflow", "update", "execute", "--workflow-id", rollout.WorkflowID(id),
		"--name", rollout.UpdateAcknowledge, "--input", mustJSON(c.t, rollout.AckRequest{Receipt: wrong}))
	require.Error(c.t, err, "%s: a wrong receipt was accepted:\n%s", id, out)
	require.Contains(c.t, out, "does not match")
	require.Equal(c.t, rollout.PhaseAwaitingAck, c.nativeStatus(ctx, id).Phase, "%s: a refused update changes nothing", id)

	for range 2 {
		var upd struct {
			Name     string `json:"name"`
			UpdateID string `json:"updateId"`
		}
		c.cliJSON(ctx, &upd, "workflow", "update", "execute", "--workflow-id", rollout.WorkflowID(id),
			"--name", rollout.UpdateAcknowledge, "--update-id", "ack/"+id,
			"--input", mustJSON(c.t, rollout.AckRequest{Receipt: receipt}))
		require.Equal(c.t, rollout.UpdateAcknowledge, upd.Name)
		require.Equal(c.t, "ack/"+id, upd.UpdateID)
	}

	var res struct {
		Status     string `json:"status"`
		CloseEvent struct {
			Attrs struct {
				Result []rollout.Result `json:"result"`
			} `json:"workflowExecutionCompletedEventAttributes"`
		} `json:"closeEvent"`
	}
	c.cliJSON(ctx, &res, "workflow", "result", "--workflow-id", rollout.WorkflowID(id))
	require.Equal(c.t, "COMPLETED", res.Status, id)
	require.Len(c.t, res.CloseEvent.Attrs.Result, 1)
	require.Equal(c.t, receipt, *res.CloseEvent.Attrs.Result[0].Receipt, "%s completes with the acknowledged result", id)
}

// nativeStatus answers the status query through the CLI.
func (c *cluster) nativeStatus(ctx context.Context, id string) rollout.Status {
	c.t.Helper()
	var q struct {
		QueryResult []rollout.Status `json:"queryResult"`
	}
	c.cliJSON(ctx, &q, "workflow", "query", "--workflow-id", rollout.WorkflowID(id), "--name", rollout.QueryStatus)
	require.Len(c.t, q.QueryResult, 1)
	return q.QueryResult[0]
}

// cliList returns the workflow IDs a visibility query lists.
func (c *cluster) cliList(ctx context.Context, query string) []string {
	c.t.Helper()
	var listed []struct {
		Execution struct {
			WorkflowID string `json:"workflowId"`
		} `json:"execution"`
	}
	c.cliJSON(ctx, &listed, "workflow", "list", "--query", query)
	ids := make([]string, 0, len(listed))
	for _, e := range listed {
		ids = append(ids, e.Execution.WorkflowID)
	}
	return ids
}

// cliJSON runs a Temporal CLI command with -o json and decodes its standard
// output into v (the CLI logs to standard error, which only goes into the
// failure message).
func (c *cluster) cliJSON(ctx context.Context, v any, args ...string) {
	c.t.Helper()
	args = append(args, "--output", "json", "--address", c.hostPort, "--namespace", "default")
	cmd := exec.CommandContext(ctx, bins.temporal, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(c.t, cmd.Run(), "temporal %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	require.NoError(c.t, json.Unmarshal(stdout.Bytes(), v), "temporal %s printed:\n%s", strings.Join(args, " "), stdout.String())
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}
