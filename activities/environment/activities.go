// Package environment holds the activities that talk to an environment
// server's data plane (StartEnvironment, OperateEnvironment, Verify) and the
// one control-plane call a rollout makes itself (AuthoriseAttempt, for a
// start-over). Every mutation carries the rollout's attempt fence and a
// request id from its logical position, so a retry is answered from the
// server's stored response. Inputs and results are the rollout workflow's
// contract (package workflows/rollout).
package environment

import (
	"net/http"

	"go.temporal.io/sdk/temporal"

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
}

func (a *Activities) envURL(ref rollout.EnvRef) (string, error) {
	if ref.URL != "" {
		return ref.URL, nil
	}
	if a.URL != "" {
		return a.URL, nil
	}
	return "", rollout.BadInput("environment %q has no server URL and the worker has no default", ref.Name)
}

func (a *Activities) store() (*transcriptstore.Store, error) {
	if a.Store == nil {
		// A worker built without a store is a configuration bug, not
		// something a retry fixes.
		return nil, temporal.NewNonRetryableApplicationError("activities: no transcript store configured", rollout.ErrBadInput, nil)
	}
	return a.Store, nil
}
