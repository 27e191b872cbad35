package visibility

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/workflows/set"
)

// Describer describes a workflow: a Temporal client is one.
type Describer interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// ReadSetFence reads the fence record of the set named name; a set never restored has none (no
// windows). Any other failure is an error: a caller that cannot read the
// record must not take the run as unfenced.
func ReadSetFence(ctx context.Context, d Describer, name string) (set.SetFence, error) {
	resp, err := d.DescribeWorkflowExecution(ctx, set.SetFenceWorkflowID(name), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return set.SetFence{Set: name}, nil
	}
	if err != nil {
		return set.SetFence{}, fmt.Errorf("read the fence record of set %s: %w", name, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	p, ok := info.GetMemo().GetFields()[set.MemoSetFence]
	if !ok {
		return set.SetFence{}, fmt.Errorf("read the fence record of set %s: %s has no %s memo", name, set.SetFenceWorkflowID(name), set.MemoSetFence)
	}
	var f set.SetFence
	if err := converter.GetDefaultDataConverter().FromPayload(p, &f); err != nil || f.Set != name || len(f.Windows) == 0 {
		return set.SetFence{}, fmt.Errorf("read the fence record of set %s: its memo does not decode as a record of the set (%v)", name, err)
	}
	last := &f.Windows[len(f.Windows)-1]
	if last.Before.IsZero() {
		if info.GetStartTime() == nil {
			return set.SetFence{}, fmt.Errorf("read the fence record of set %s: no start time", name)
		}
		last.Before = info.GetStartTime().AsTime()
	}
	return f, nil
}
