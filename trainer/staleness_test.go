package trainer

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestParsePolicyVersion(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"42", 42, true}, {"step-42", 42, true}, {"v3", 3, true}, {"ckpt_0007", 7, true}, {"run7-step12", 12, true},
		{"", 0, false}, {"lora-a", 0, false}, {"v3-final", 0, false}, {"1234567890123456789012", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParsePolicyVersion(tt.in)
		require.Equal(t, tt.want, got, "ParsePolicyVersion(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		require.Equal(t, tt.ok, ok, "ParsePolicyVersion(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
	}
}

// TestStaleness: a running rollout is stale when its oldest versioned call
// lags the trainer by more than MaxLag; unversioned calls never count; with
// Cancel the stale ones (only) are cancelled, and a rollout that closed
// meanwhile is no error.
func TestStaleness(t *testing.T) {
	lineage := func(versions ...string) rollout.Status {
		var st rollout.Status
		for _, v := range versions {
			st.Boundary.Lineage = append(st.Boundary.Lineage, rollout.LineageEntry{PolicyVersion: v})
		}
		return st
	}
	c := statusQueries(map[string]rollout.Status{
		rollout.WorkflowID("s1-0000"): lineage("step-9", "step-10"), // lag 1
		rollout.WorkflowID("s1-0001"): lineage("step-7", "step-10"), // lag 3: stale
		rollout.WorkflowID("s1-0002"): lineage("lora-a"),            // unversioned
		rollout.WorkflowID("s1-0003"): lineage(),                    // no call yet
		rollout.WorkflowID("s1-0004"): lineage("v2"),                // lag 8: stale, closes meanwhile
	})
	var mu sync.Mutex
	var cancelled []string
	c.Cancel = func(workflowID, _ string) error {
		if workflowID == rollout.WorkflowID("s1-0004") {
			return serviceerror.NewNotFound("closed")
		}
		mu.Lock()
		defer mu.Unlock()
		cancelled = append(cancelled, workflowID)
		return nil
	}
	var runs []*workflowpb.WorkflowExecutionInfo
	for i := range 5 {
		runs = append(runs, info(t, RolloutID("s1", i), "r", running, t0, 0, "model"))
	}
	c.Pages = [][]*workflowpb.WorkflowExecutionInfo{runs}
	for _, cancel := range []bool{false, true} {
		res, err := staleness(context.Background(), stalenessTarget{q: c, cancel: c.CancelWorkflow}, c, StalenessRequest{Set: "s1", Version: 10, MaxLag: 2, Cancel: cancel})
		require.NoError(t, err)
		got := fmt.Sprint(res.Checked, res.Stale)
		assert.Equal(t, "5 [{s1-0001 7 3} {s1-0004 2 8}]", got, "cancel %v: checked and stale %s", cancel, got)
		wantCancelled := 0
		if cancel {
			wantCancelled = 1
		}
		assert.Equal(t, wantCancelled, res.Cancelled, "cancel %v: cancelled %d", cancel, res.Cancelled)
	}
	assert.Equal(t, "[rollout/s1-0001]", fmt.Sprint(cancelled), "cancelled %v", cancelled)
}
