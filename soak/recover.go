package soak

import (
	"context"
	"errors"

	"github.com/turnstile-rl/turnstile/client"
)

// scopedRecoveryAvailable says whether recoverServer can recover an
// environment server's rollouts. TODO(scoped recovery, issue 12 item 3):
// once client.(*Client).RecoverServer is merged, set this to true (and
// envKillDefault to a few minutes) and call it in recoverServer.
const scopedRecoveryAvailable = false

// envKillDefault is Defaults().EnvKillEvery: off until scoped recovery
// exists.
const envKillDefault = 0

// errNoScopedRecovery is recoverServer's answer until it is wired.
var errNoScopedRecovery = errors.New("scoped recovery (client.RecoverServer) is not available in this build")

// recoverRequest is one scoped recovery: the rollouts of set whose sessions
// lived on server go back to checkpoint (under root) on replacement.
type recoverRequest struct {
	Set, Server, Replacement, Checkpoint, Root, RequestID string
}

// recoverServer is the one place the soak recovers a killed environment
// server. TODO(scoped recovery): replace the body with
//
//	_, err := ts.RecoverServer(ctx, client.RecoverServerRequest{Set: r.Set, Server: r.Server,
//		Replacement: r.Replacement, Checkpoint: r.Checkpoint, Root: r.Root, RequestID: r.RequestID})
//	return err
//
// (bin/starter recover --set S --server URL --replacement URL is the same
// for an operator).
func recoverServer(ctx context.Context, ts *client.Client, r recoverRequest) error {
	return errNoScopedRecovery
}
