package workers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/turnstile-rl/turnstile/activities/model"
)

// Environment variables of the data worker's Temporal settings (the
// rollout task queue's pollers and slots). Unset or blank: the default.
const (
	EnvWorkflowTaskPollers = "TURNSTILE_WORKFLOW_TASK_POLLERS"
	EnvActivityTaskPollers = "TURNSTILE_ACTIVITY_TASK_POLLERS"
	EnvWorkflowTaskSlots   = "TURNSTILE_WORKFLOW_TASK_SLOTS"
	EnvActivitySlots       = "TURNSTILE_ACTIVITY_SLOTS"
	EnvLocalActivitySlots  = "TURNSTILE_LOCAL_ACTIVITY_SLOTS"
	EnvStickyCacheSize     = "TURNSTILE_STICKY_CACHE_SIZE"
	// EnvPollerAutoscaling "true" lets the SDK scale the pollers between
	// one and the pollers settings (its default maximum when unset).
	EnvPollerAutoscaling = "TURNSTILE_POLLER_AUTOSCALING"
)

// Tuning is the data worker's Temporal settings. Zero means the SDK's
// default for that field.
type Tuning struct {
	WorkflowTaskPollers int
	ActivityTaskPollers int
	WorkflowTaskSlots   int
	ActivitySlots       int
	LocalActivitySlots  int
	// StickyCacheSize is how many workflows' state the process keeps
	// between their tasks (the SDK's sticky cache, process-wide).
	StickyCacheSize int
	// PollerAutoscaling scales the pollers with the load, up to the
	// pollers settings.
	PollerAutoscaling bool
}

// DefaultTuning is what a worker runs with when nothing is set.
var DefaultTuning = Tuning{}

// maxTuning bounds every tuning value: far beyond what one process can use,
// so a typo (an extra zero or two) is refused, not obeyed.
const maxTuning = 1_000_000

// tuningFromLookup reads Tuning through lookup; a value that is not a
// whole number in 1..maxTuning is an error naming its variable.
func tuningFromLookup(lookup func(string) (string, bool)) (Tuning, error) {
	t := DefaultTuning
	for _, f := range []struct {
		env string
		dst *int
	}{
		{EnvWorkflowTaskPollers, &t.WorkflowTaskPollers},
		{EnvActivityTaskPollers, &t.ActivityTaskPollers},
		{EnvWorkflowTaskSlots, &t.WorkflowTaskSlots},
		{EnvActivitySlots, &t.ActivitySlots},
		{EnvLocalActivitySlots, &t.LocalActivitySlots},
		{EnvStickyCacheSize, &t.StickyCacheSize},
	} {
		v, ok := lookup(f.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > maxTuning {
			return Tuning{}, fmt.Errorf("%s=%q: want a whole number from 1 to %d", f.env, v, maxTuning)
		}
		*f.dst = n
	}
	if v, ok := lookup(EnvPollerAutoscaling); ok && strings.TrimSpace(v) != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return Tuning{}, fmt.Errorf("%s=%q: want true or false", EnvPollerAutoscaling, v)
		}
		t.PollerAutoscaling = b
	}
	return t, nil
}

// options applies t to the data worker's options.
func (t Tuning) options(o worker.Options) worker.Options {
	o.MaxConcurrentWorkflowTaskPollers = t.WorkflowTaskPollers
	o.MaxConcurrentActivityTaskPollers = t.ActivityTaskPollers
	o.MaxConcurrentWorkflowTaskExecutionSize = t.WorkflowTaskSlots
	o.MaxConcurrentActivityExecutionSize = t.ActivitySlots
	o.MaxConcurrentLocalActivityExecutionSize = t.LocalActivitySlots
	// A streamed model call heartbeats each durable prefix as it writes
	// it; the SDK must send it then, not batch it for most of the
	// heartbeat timeout (model.DefaultHeartbeatThrottle).
	o.MaxHeartbeatThrottleInterval = model.DefaultHeartbeatThrottle
	o.DefaultHeartbeatThrottleInterval = model.DefaultHeartbeatThrottle
	if t.PollerAutoscaling {
		o.MaxConcurrentWorkflowTaskPollers, o.MaxConcurrentActivityTaskPollers = 0, 0
		o.WorkflowTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{MaximumNumberOfPollers: t.WorkflowTaskPollers})
		o.ActivityTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{MaximumNumberOfPollers: t.ActivityTaskPollers})
	}
	return o
}

// Environment variables of how often a streamed generation's prefix is made
// durable (model.Activities.PrefixTokens, PrefixInterval). Unset or blank:
// model.DefaultPrefixTokens, model.DefaultPrefixInterval.
// EnvModelPrefixBound (model.EnvModelPrefixBound) is "strict" for bounded
// generation (model.Activities.PrefixBound), "off" (or unset) otherwise.
const (
	EnvModelPrefixTokens   = "TURNSTILE_MODEL_PREFIX_TOKENS"
	EnvModelPrefixInterval = "TURNSTILE_MODEL_PREFIX_INTERVAL"
	EnvModelPrefixBound    = model.EnvModelPrefixBound
)

// PrefixSettings are how often a streamed generation's prefix is made
// durable; zero means the model package's default. Bound is
// model.PrefixBoundOff or model.PrefixBoundStrict ("": off).
type PrefixSettings struct {
	Tokens   int
	Interval time.Duration
	Bound    string
}

// maxPrefixInterval bounds EnvModelPrefixInterval: a longer one loses more
// on a crash than any call is worth keeping.
const maxPrefixInterval = 10 * time.Minute

// prefixFromLookup reads PrefixSettings through lookup; a bad value is an
// error naming its variable.
func prefixFromLookup(lookup func(string) (string, bool)) (PrefixSettings, error) {
	var p PrefixSettings
	if v, ok := lookup(EnvModelPrefixTokens); ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > maxTuning {
			return PrefixSettings{}, fmt.Errorf("%s=%q: want a whole number of tokens from 1 to %d", EnvModelPrefixTokens, v, maxTuning)
		}
		p.Tokens = n
	}
	if v, ok := lookup(EnvModelPrefixInterval); ok && strings.TrimSpace(v) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 || d > maxPrefixInterval {
			return PrefixSettings{}, fmt.Errorf("%s=%q: want a duration such as 2s, above zero and at most %s", EnvModelPrefixInterval, v, maxPrefixInterval)
		}
		p.Interval = d
	}
	if v, ok := lookup(EnvModelPrefixBound); ok && strings.TrimSpace(v) != "" {
		bound, err := model.ParsePrefixBound(strings.TrimSpace(v))
		if err != nil {
			return PrefixSettings{}, err
		}
		p.Bound = bound
	}
	return p, nil
}
