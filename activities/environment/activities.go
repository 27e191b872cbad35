// Package environment holds the activities that talk to an environment
// server's data plane (StartEnvironment, OperateEnvironment, Verify) and the
// one control-plane call a rollout makes itself (AuthoriseAttempt, for a
// start-over). Every mutation carries the rollout's attempt fence and a
// request id from its logical position, so a retry is answered from the
// server's stored response. Inputs and results are the rollout workflow's
// contract (package workflows/rollout).
package environment

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Activities holds what the environment activities share. Register a
// pointer to it on a worker; its methods are the activities, named by the
// rollout.*Name constants.
type Activities struct {
	// Store holds transcripts and tool schemas.
	Store *transcriptstore.Store
	// URL is the default environment server base URL, used when an EnvRef
	// names none.
	URL string
	// HTTPClient is used for environment calls; nil means the default
	// client.
	HTTPClient *http.Client
	// DataToken is sent to environment servers' data plane (RULES.md R1);
	// empty sends none (a server run with --insecure-no-data-auth).
	DataToken string
	// ControlToken lets AuthoriseAttempt install a start-over's attempt on
	// an environment server's control plane; it never travels in workflow
	// input.
	ControlToken string
	// Failpoints lets crash tests kill the worker at named places; nil is
	// unarmed.
	Failpoints *failpoint.Set
	// Destinations decides which servers the tokens may go to, and which
	// tokens each gets: a named server's own, else the global ones (its
	// own, else DataToken and ControlToken). Nil admits the default server
	// URL only.
	Destinations *destination.Config
	// Fences answers whether a restore fenced a seed's run chain (package
	// bookkeeping's SetFences). A seed that names its set's fence
	// (StartEnvironmentInput.Fence) is refused without it.
	Fences SetFenceChecker
}

// SetFenceChecker says whether a restore of a set fenced the run chain that
// started at startedAt, and by which restore.
type SetFenceChecker interface {
	FencedRun(ctx context.Context, set string, startedAt time.Time) (rollout.FenceWindow, bool, error)
}

// checkFence stops a seed whose run chain a restore of its set fenced,
// before anything is sent: in the restored world the run does not exist.
func (a *Activities) checkFence(ctx context.Context, in rollout.StartEnvironmentInput) error {
	f := in.Fence
	if f == nil {
		return nil
	}
	if err := rollout.ValidateSet(f.Set); err != nil {
		return rollout.BadInput("rollout %s: fence check: %v", in.RolloutID, err)
	}
	if a.Fences == nil {
		// A worker built without the check is a configuration bug; a seed
		// must not go on unchecked.
		return temporal.NewNonRetryableApplicationError("activities: no set fence checker configured", rollout.ErrBadInput, nil)
	}
	w, fenced, err := a.Fences.FencedRun(ctx, f.Set, f.StartedAt)
	if err != nil {
		return err
	}
	if fenced {
		return rollout.FencedByRestoreError(in.RolloutID, in.Attempt, f.Set, f.StartedAt, w)
	}
	return nil
}

// destinations is Destinations, or the default server alone.
func (a *Activities) destinations() *destination.Config {
	if a.Destinations != nil {
		return a.Destinations
	}
	c := &destination.Config{DataToken: a.DataToken, ControlToken: a.ControlToken}
	if u, err := destination.Canonical(a.URL); err == nil {
		c.EnvServers = []destination.Server{{Name: destination.DefaultName, URL: u}}
	}
	return c
}

// server resolves the data plane of the server ref names, before anything
// is sent: a destination not configured is refused, non-retryably.
func (a *Activities) server(ref rollout.EnvRef) (destination.Target, error) {
	t, err := a.destinations().Env(ref.Server, ref.URL)
	if err != nil {
		return destination.Target{}, rollout.DestinationRefused(fmt.Errorf("environment %s: %w", ref.Name, err))
	}
	if t.Secret == "" {
		t.Secret = a.DataToken
	}
	return t, nil
}

// controlServer resolves the control plane of the server ref names: it
// must be admitted as a participant (it gets the control token).
func (a *Activities) controlServer(ref rollout.EnvRef) (destination.Target, error) {
	t, err := a.destinations().EnvControl(ref.Server, ref.URL)
	if err != nil {
		return destination.Target{}, rollout.DestinationRefused(fmt.Errorf("environment %s: %w", ref.Name, err))
	}
	if t.Secret == "" {
		t.Secret = a.ControlToken
	}
	return t, nil
}

func (a *Activities) store() (*transcriptstore.Store, error) {
	if a.Store == nil {
		// A worker built without a store is a configuration bug, not
		// something a retry fixes.
		return nil, temporal.NewNonRetryableApplicationError("activities: no transcript store configured", rollout.ErrBadInput, nil)
	}
	return a.Store, nil
}
