package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/client"
)

// envKillDefault is Defaults().EnvKillEvery: off. Kills and their scoped
// recovery work (recoverServer), but the end checks do not yet tell the
// runs a recovery terminated (older attempts of moved rollouts) from lost
// ones, and the drain counts closed runs, not rollouts: with kills on, a
// soak reports those as problems. Turn them on with -env-kill-every.
const envKillDefault time.Duration = 0

// recoverRequest is one scoped recovery: the rollouts of set whose sessions
// lived on server go back to checkpoint (under root) on replacement.
type recoverRequest struct {
	Set, Server, Replacement, Checkpoint, Root, RequestID string
}

// recoverServer is the one place the soak recovers a killed environment
// server: scoped recovery (bin/starter recover for an operator), waited
// on, so the next fault meets a recovered set. An empty Checkpoint takes
// the set's newest committed one.
func recoverServer(ctx context.Context, ts *client.Client, r recoverRequest) error {
	started, err := ts.RecoverServer(ctx, client.RecoverServerRequest{Set: r.Set, Server: r.Server,
		Replacement: r.Replacement, Checkpoint: r.Checkpoint, Root: r.Root, RequestID: r.RequestID})
	if err != nil {
		return err
	}
	if _, err := ts.WaitRecoverServer(ctx, started); err != nil {
		return fmt.Errorf("recovery %s: %w", started.WorkflowID, err)
	}
	return nil
}
