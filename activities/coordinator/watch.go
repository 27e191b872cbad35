package coordinator

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ProbeParticipants is the watchdog's probe round: it asks each server's
// health route (GET /healthz, which does no work and carries no token)
// whether it answers within the timeout, each on a fresh connection, and
// counts the set's running rollouts. Any answer, whatever its status,
// counts as alive: a slow or busy server is not dead.
func (c *Coordinator) ProbeParticipants(ctx context.Context, in checkpoint.ProbeParticipantsInput) (checkpoint.ProbeParticipantsResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.ProbeParticipantsResult{}, rollout.BadInput("%v", err)
	}
	timeout, err := time.ParseDuration(in.Timeout)
	if err != nil || timeout <= 0 {
		return checkpoint.ProbeParticipantsResult{}, rollout.BadInput("timeout %q: want a positive duration", in.Timeout)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.ProbeParticipantsResult{}, err
	}
	res := checkpoint.ProbeParticipantsResult{Answered: make([]bool, len(in.Servers))}
	if err := fanout.Each(ctx, len(in.Servers), c.limit(), func(ctx context.Context, i int) error {
		res.Answered[i] = c.answers(ctx, in.Servers[i], timeout)
		return nil
	}); err != nil {
		return checkpoint.ProbeParticipantsResult{}, err
	}
	q := rollout.SetQuery(in.Set) + ` AND ExecutionStatus = "Running"`
	count, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
	if err != nil {
		return checkpoint.ProbeParticipantsResult{}, fmt.Errorf("count running rollouts of set %s: %w", in.Set, err)
	}
	res.Running = int(count.GetCount())
	return res, nil
}
