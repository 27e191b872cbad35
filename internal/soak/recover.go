package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/trainer"
)

// envKillDefault is Defaults().EnvKillEvery: an environment server dies
// every few minutes, as a long run meets it.
const envKillDefault = 3 * time.Minute

// recoverRequest is one scoped recovery: the rollouts of set whose sessions
// lived on server go back to checkpoint (under root) on replacement.
type recoverRequest struct {
	Set, Server, Replacement, Checkpoint, Root, RequestID string
}

// recoverServer is the one place the soak recovers a killed environment
// server: scoped recovery (bin/starter recover for an operator), waited
// on, so the next fault meets a recovered set. An empty Checkpoint takes
// the set's newest committed one.
func recoverServer(ctx context.Context, ts *trainer.Client, r recoverRequest) error {
	started, err := ts.RecoverServer(ctx, trainer.RecoverServerRequest{Set: r.Set, Server: r.Server,
		Replacement: r.Replacement, Checkpoint: r.Checkpoint, Root: r.Root, RequestID: r.RequestID})
	if err != nil {
		return err
	}
	if _, err := ts.WaitRecoverServer(ctx, started); err != nil {
		return fmt.Errorf("recovery %s: %w", started.WorkflowID, err)
	}
	return nil
}
