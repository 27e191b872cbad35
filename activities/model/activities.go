// Package model holds the CallModel activity: it loads the conversation a
// transcript head names, asks an OpenAI-compatible endpoint (vLLM, SGLang,
// OpenAI) for the next message through the official openai-go SDK, stores
// the answer and its generation record (token ids, log-probs, policy
// version), and returns digests only. Its input and result types are the
// rollout workflow's contract (package workflows/rollout).
package model

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// DefaultHeartbeatEvery is how often a waiting model call heartbeats when
// Activities.HeartbeatEvery is zero.
const DefaultHeartbeatEvery = 5 * time.Second

// Limits on what a model endpoint may answer, and the worker settings
// they are read from (workers.ConfigFromLookup). They are the worker's,
// not the rollout's: they protect the worker's memory, its transcript
// store and the rollout's history from the endpoint, so a submission must
// not be able to raise them, and they change no workflow input.
const (
	// EnvMaxToolCalls bounds the tool calls of one answer: each becomes an
	// environment activity and its history events.
	EnvMaxToolCalls = "TURNSTILE_MODEL_MAX_TOOL_CALLS"
	// EnvMaxAnswerBytes bounds the bytes of one answer's body.
	EnvMaxAnswerBytes = "TURNSTILE_MODEL_MAX_ANSWER_BYTES"
	// EnvMaxRetryAfter bounds the delay a Retry-After may ask for; the
	// call's own timeout bounds it too.
	EnvMaxRetryAfter = "TURNSTILE_MODEL_MAX_RETRY_AFTER"

	DefaultMaxToolCalls   = 64
	DefaultMaxAnswerBytes = 32 << 20
	DefaultMaxRetryAfter  = rollout.DefaultModelCallTimeout
)

// placeholderAPIKey is sent when the worker has no API key: local
// OpenAI-compatible servers ignore it, and the SDK wants some credential.
const placeholderAPIKey = "turnstile-no-key"

// Activities holds what the model activity needs. Register a pointer to it
// on a worker; its method CallModel is the activity rollout.CallModelName.
type Activities struct {
	// Store holds transcripts and tool schemas.
	Store *transcriptstore.Store
	// BaseURL is the default OpenAI-compatible base URL, e.g.
	// http://127.0.0.1:8092/v1, used when a PolicyRef names none.
	BaseURL string
	// APIKey is sent to the model endpoint; it never travels in workflow
	// input.
	APIKey string
	// HTTPClient is used for model calls; nil means the default client.
	HTTPClient *http.Client
	// Failpoints lets crash tests kill the worker at named places; nil is
	// unarmed.
	Failpoints *failpoint.Set
	// HeartbeatEvery is how often a model call heartbeats while it waits;
	// zero means DefaultHeartbeatEvery.
	HeartbeatEvery time.Duration
	// Destinations decides which endpoints the API key may go to, and which
	// key each gets: a named endpoint's own, else the global one (its own,
	// else APIKey). Nil admits the default BaseURL only.
	Destinations *destination.Config
	// PrefixTokens and PrefixInterval are how often a streamed
	// generation's prefix is made durable: every PrefixTokens tokens or
	// PrefixInterval, whichever comes first. Zero means the defaults.
	PrefixTokens   int
	PrefixInterval time.Duration
	// PrefixBound is PrefixBoundStrict for bounded generation: a call
	// that can continue a prefix asks the endpoint for at most
	// PrefixTokens tokens beyond its newest durable prefix per request, so
	// a crash makes the endpoint generate at most that many again.
	// PrefixBoundOff (or empty) streams each answer in one request.
	PrefixBound string
	// HeartbeatThrottle must be the worker's MaxHeartbeatThrottleInterval:
	// prefix flushes by time alone are spaced by at least this much, so
	// their heartbeats go out at once (a flush by token count does not
	// wait: the prefix index names its chunk). Zero means
	// DefaultHeartbeatThrottle.
	HeartbeatThrottle time.Duration
	// Heartbeat records a heartbeat of a streamed call with its durable
	// prefix; nil is activity.RecordHeartbeat. A test observes the
	// prefixes through it (the SDK's test environment batches heartbeats
	// for half a minute).
	Heartbeat func(ctx context.Context, details ...any)
	// MaxToolCalls bounds the tool calls of one answer (0:
	// DefaultMaxToolCalls); more fail the call, non-retryably.
	MaxToolCalls int
	// MaxAnswerBytes bounds an answer's body (0: DefaultMaxAnswerBytes);
	// a larger one fails the call, non-retryably, before it is parsed.
	MaxAnswerBytes int64
	// MaxRetryAfter bounds the retry delay a 429 or 5xx may ask for (0:
	// DefaultMaxRetryAfter); the call's start-to-close timeout bounds it
	// too.
	MaxRetryAfter time.Duration

	// Received, when set, counts the generated tokens read off model
	// streams, those of calls cut before they finished included. The
	// endpoint's count of the tokens it sent, less this, is what was in
	// flight (sent, never read) when calls were cut.
	Received *atomic.Int64

	mu      sync.Mutex
	clients map[string]*openai.Client // by endpoint name and URL
	routes  map[string]int            // token-in route states, by routeKey
}

// destinations is Destinations, or the default endpoint alone.
func (a *Activities) destinations() *destination.Config {
	if a.Destinations != nil {
		return a.Destinations
	}
	c := &destination.Config{APIKey: a.APIKey}
	if u, err := destination.Canonical(a.BaseURL); err == nil {
		c.ModelEndpoints = []destination.Endpoint{{Name: destination.DefaultName, URL: u}}
	}
	return c
}

func (a *Activities) heartbeatEvery() time.Duration {
	if a.HeartbeatEvery > 0 {
		return a.HeartbeatEvery
	}
	return DefaultHeartbeatEvery
}

func (a *Activities) heartbeat(ctx context.Context, details ...any) {
	if a.Heartbeat != nil {
		a.Heartbeat(ctx, details...)
		return
	}
	activity.RecordHeartbeat(ctx, details...)
}

func (a *Activities) prefixTokens() int {
	if a.PrefixTokens > 0 {
		return a.PrefixTokens
	}
	return DefaultPrefixTokens
}

func (a *Activities) prefixInterval() time.Duration {
	if a.PrefixInterval > 0 {
		return a.PrefixInterval
	}
	return DefaultPrefixInterval
}

func (a *Activities) heartbeatThrottle() time.Duration {
	if a.HeartbeatThrottle > 0 {
		return a.HeartbeatThrottle
	}
	return DefaultHeartbeatThrottle
}

func (a *Activities) maxToolCalls() int {
	if a.MaxToolCalls > 0 {
		return a.MaxToolCalls
	}
	return DefaultMaxToolCalls
}

func (a *Activities) maxAnswerBytes() int64 {
	if a.MaxAnswerBytes > 0 {
		return a.MaxAnswerBytes
	}
	return DefaultMaxAnswerBytes
}

func (a *Activities) maxRetryAfter() time.Duration {
	if a.MaxRetryAfter > 0 {
		return a.MaxRetryAfter
	}
	return DefaultMaxRetryAfter
}

func (a *Activities) store() (*transcriptstore.Store, error) {
	if a.Store == nil {
		// A worker built without a store is a configuration bug, not
		// something a retry fixes.
		return nil, temporal.NewNonRetryableApplicationError("activities: no transcript store configured", rollout.ErrBadInput, nil)
	}
	return a.Store, nil
}
