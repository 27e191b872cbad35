package workers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/internal/artifact"
)

// ModelLimits bound what a model endpoint may answer a worker. They are
// the worker's settings rather than a rollout's limits: they protect the
// worker's memory, its transcript store and the rollouts' histories from
// the endpoint, so a submission must not be able to raise them, and they
// change no workflow input (nor any recorded history).
type ModelLimits struct {
	// MaxToolCalls bounds the tool calls of one answer (model.EnvMaxToolCalls).
	MaxToolCalls int
	// MaxAnswerBytes bounds an answer's body (model.EnvMaxAnswerBytes).
	MaxAnswerBytes int64
	// MaxRetryAfter bounds the retry delay a 429 or 5xx may ask for
	// (model.EnvMaxRetryAfter); the model call's timeout bounds it too.
	MaxRetryAfter time.Duration
}

// modelLimitsFromLookup reads ModelLimits; unset ones take the model
// package's defaults.
func modelLimitsFromLookup(lookup func(string) (string, bool)) (ModelLimits, error) {
	l := ModelLimits{MaxToolCalls: model.DefaultMaxToolCalls, MaxAnswerBytes: model.DefaultMaxAnswerBytes, MaxRetryAfter: model.DefaultMaxRetryAfter}
	get := func(key string) (string, bool) {
		v, ok := lookup(key)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if v, ok := get(model.EnvMaxToolCalls); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return l, fmt.Errorf("%s=%q: want a positive number of tool calls", model.EnvMaxToolCalls, v)
		}
		l.MaxToolCalls = n
	}
	if v, ok := get(model.EnvMaxAnswerBytes); ok {
		n, err := artifact.ParseSize(v)
		if err != nil {
			return l, fmt.Errorf("%s=%q: %w", model.EnvMaxAnswerBytes, v, err)
		}
		l.MaxAnswerBytes = n
	}
	if v, ok := get(model.EnvMaxRetryAfter); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return l, fmt.Errorf("%s=%q: want a positive Go duration such as 30s", model.EnvMaxRetryAfter, v)
		}
		l.MaxRetryAfter = d
	}
	return l, nil
}
