package rollout

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// Further application error types, beside those in types.go. Each is
// non-retryable: retrying the same input cannot give another answer.
const (
	// ErrBadInput: the activity input is malformed (empty id, bad digest,
	// unknown style). Nothing was sent anywhere.
	ErrBadInput = "BadActivityInput"
	// ErrModelEmpty: the model endpoint answered without any choice.
	ErrModelEmpty = "ModelEmptyAnswer"
	// ErrTranscript: the transcript store does not hold, or cannot decode,
	// what the input names. Corrupt state fails closed.
	ErrTranscript = "TranscriptUnavailable"
)

// DefaultHeartbeatEvery is how often a waiting model call heartbeats when
// Activities.HeartbeatEvery is zero.
const DefaultHeartbeatEvery = 5 * time.Second

// placeholderAPIKey is sent when the worker has no API key: local
// OpenAI-compatible servers ignore it, and the SDK wants some credential.
const placeholderAPIKey = "turnstile-no-key"

// Activities holds what the rollout activities share. Register a pointer to
// it on a worker; its methods are the activities, named by the *Name
// constants.
type Activities struct {
	// Store holds transcripts and tool schemas.
	Store *transcriptstore.Store
	// EnvURL is the default environment server base URL, used when an
	// EnvRef names none.
	EnvURL string
	// ModelBaseURL is the default OpenAI-compatible base URL, e.g.
	// http://127.0.0.1:8092/v1, used when a PolicyRef names none.
	ModelBaseURL string
	// ModelAPIKey is sent to the model endpoint; it never travels in
	// workflow input.
	ModelAPIKey string
	// HTTPClient is used for environment and model calls; nil means the
	// default client.
	HTTPClient *http.Client
	// DataToken is sent to environment servers' data plane (RULES.md R1);
	// empty sends none (a server run with --insecure-no-data-auth).
	DataToken string
	// ControlToken lets AuthoriseAttempt install a start-over's attempt on
	// an environment server's control plane; like the API key it never
	// travels in workflow input.
	ControlToken string
	// Failpoints lets crash tests kill the worker at named places; nil is
	// unarmed.
	Failpoints *failpoint.Set
	// HeartbeatEvery is how often a model call heartbeats while it waits;
	// zero means DefaultHeartbeatEvery.
	HeartbeatEvery time.Duration

	mu      sync.Mutex
	clients map[string]*openai.Client // by base URL
}

func (a *Activities) heartbeatEvery() time.Duration {
	if a.HeartbeatEvery > 0 {
		return a.HeartbeatEvery
	}
	return DefaultHeartbeatEvery
}

func (a *Activities) envURL(ref EnvRef) (string, error) {
	if ref.URL != "" {
		return ref.URL, nil
	}
	if a.EnvURL != "" {
		return a.EnvURL, nil
	}
	return "", BadInput("environment %q has no server URL and the worker has no default", ref.Name)
}

func (a *Activities) store() (*transcriptstore.Store, error) {
	if a.Store == nil {
		// A worker built without a store is a configuration bug, not
		// something a retry fixes.
		return nil, temporal.NewNonRetryableApplicationError("activities: no transcript store configured", ErrBadInput, nil)
	}
	return a.Store, nil
}

// BadInput is a non-retryable error naming what is wrong with an input.
func BadInput(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrBadInput, nil)
}

func checkIdentity(rolloutID string, attempt int) error {
	if strings.TrimSpace(rolloutID) == "" {
		return BadInput("empty rollout id")
	}
	if attempt < 0 {
		return BadInput("rollout %s: negative attempt %d", rolloutID, attempt)
	}
	return nil
}

func checkDigest(what string, d transcript.Digest) error {
	if err := d.Validate(); err != nil {
		return BadInput("%s: %v", what, err)
	}
	return nil
}

func checkStyle(s envs.Style) error {
	switch s {
	case envs.StyleTools, envs.StyleGym:
		return nil
	default:
		return BadInput("unknown style %q (want %q or %q)", s, envs.StyleTools, envs.StyleGym)
	}
}

// StoreError classifies a transcript-store failure: a missing or corrupt blob
// does not heal by retrying, so it stops the rollout; other I/O errors may pass.
func StoreError(what string, err error) error {
	if errors.Is(err, transcript.ErrNotFound) || errors.Is(err, transcript.ErrCorrupt) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", what, err), ErrTranscript, nil)
	}
	return fmt.Errorf("%s: %w", what, err)
}
