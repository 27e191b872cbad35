package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Bounds of a submission.
const (
	// maxCount bounds a set: rollout seeds are seed*seedStride+index, so
	// indexes below seedStride keep every rollout's seed distinct.
	maxCount   = 1_000_000
	seedStride = 1_000_000
	// startConcurrency bounds concurrent StartWorkflow calls.
	startConcurrency = 16
)

// Validate reports the first field that cannot work, before anything is
// started. Messages name the starter's flags, which carry the same names.
func (r SubmitRequest) Validate() error {
	if err := checkLen("set", r.Set, rollout.MaxSetLen); err != nil {
		return err
	}
	if err := rollout.ValidateSet(r.Set); err != nil {
		return err
	}
	if err := r.validateShared(); err != nil {
		return err
	}
	if r.isDataset() {
		return r.validateDataset()
	}
	if r.GroupRetries != nil {
		return errors.New("--group-retries needs --tasks: only a dataset's rows are groups")
	}
	if r.Count < 1 || r.Count > maxCount {
		return fmt.Errorf("--count %d: want 1..%d", r.Count, maxCount)
	}
	_, err := ParseEnvs(strings.Join(r.Envs, ","))
	return err
}

// validateShared checks the fields both modes use.
func (r SubmitRequest) validateShared() error {
	if err := checkLen("--policy", r.Policy, MaxModelNameLen); err != nil {
		return err
	}
	if r.Policy != strings.TrimSpace(r.Policy) {
		return fmt.Errorf("--policy %q: surrounding spaces", r.Policy)
	}
	if r.MaxTurns < 0 || r.MaxTurns > rollout.MaxMaxTurns {
		return fmt.Errorf("--max-turns %d: want 1..%d, or 0 for each environment's default", r.MaxTurns, rollout.MaxMaxTurns)
	}
	if err := r.validateBudgets(); err != nil {
		return err
	}
	if err := checkSampling(r.Sampling); err != nil {
		return err
	}
	if err := checkDestination("--env-server", r.EnvServer, "--env-url", r.EnvURL); err != nil {
		return err
	}
	return checkDestination("--policy-endpoint", r.PolicyEndpoint, "--model-url", r.ModelURL)
}

// RolloutID is the id of rollout i of set: "<set>-0007" (see
// rollout.SubmittedID; a restore derives a submission's ids from it).
func RolloutID(set string, i int) string { return rollout.SubmittedID(set, i) }

// RolloutSeed is the seed of rollout i of a set seeded with seed.
func RolloutSeed(seed int64, i int) int64 { return seed*seedStride + int64(i) }

// DefaultMaxTurns is the limit of env's rollouts when a request does not
// set one: the environment's own (its catalog entry says why that much),
// else the workflow's default.
func DefaultMaxTurns(env string) int {
	if e, ok := catalog.Lookup(env); ok {
		return e.MaxTurns
	}
	return rollout.DefaultMaxTurns
}

// ScriptedPolicy is the model name of env's scripted policy on the policy
// server ("scripted-counter", …): the model a rollout uses when a request
// names no policy. The catalog's tests check the policy server offers it
// for every environment the catalog holds.
func ScriptedPolicy(env string) string { return envs.ScriptedModel(env) }

// ParseEnvs splits a comma-separated --env value ("counter,blackjack") into
// environment names, in the order given. Every name must be in the catalog;
// empty and repeated names are refused.
func ParseEnvs(value string) ([]string, error) {
	known := catalog.Names()
	if err := checkLen("--env", value, MaxEnvListLen); err != nil {
		return nil, err
	}
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("--env is required: one or more of %s, comma-separated", strings.Join(known, ", "))
	}
	var out []string
	for i, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("--env %q: name %d is empty", value, i+1)
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("--env %q: no task generator for environment %q (known: %s)", value, name, strings.Join(known, ", "))
		case slices.Contains(out, name):
			return nil, fmt.Errorf("--env %q: %q is listed twice", value, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// BuildInputs returns the attempt-0 input of every rollout of r, in index
// order: rollout i runs in r.Envs[i % len(r.Envs)], with that environment's
// scripted policy and turn limit unless r sets them. Equal requests give
// equal inputs.
func BuildInputs(r SubmitRequest) ([]rollout.Input, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.isDataset() {
		inputs, err := buildDatasetInputs(r)
		if err != nil {
			return nil, err
		}
		return inputs, checkInputSizes(inputs)
	}
	out := make([]rollout.Input, r.Count)
	for i := range out {
		env := r.Envs[i%len(r.Envs)]
		task, err := catalog.Task(env, r.Seed, i)
		if err != nil {
			return nil, err
		}
		model := r.Policy
		if model == "" {
			model = ScriptedPolicy(env)
		}
		maxTurns := r.MaxTurns
		if maxTurns == 0 {
			maxTurns = DefaultMaxTurns(env)
		}
		out[i] = rollout.Input{
			RolloutID:  RolloutID(r.Set, i),
			Set:        r.Set,
			Attempt:    0,
			Task:       task,
			Env:        rollout.EnvRef{Name: env, URL: r.EnvURL, Server: r.EnvServer},
			Policy:     rollout.PolicyRef{Model: model, BaseURL: r.ModelURL, Endpoint: r.PolicyEndpoint},
			Seed:       RolloutSeed(r.Seed, i),
			Limits:     r.limits(maxTurns),
			Sampling:   r.Sampling,
			RequireAck: r.RequireAck,
		}
	}
	return out, checkInputSizes(out)
}

// checkInputSizes checks every input's encoded size; equal inputs but for
// their ids and seeds are checked once per distinct task.
func checkInputSizes(inputs []rollout.Input) error {
	seen := map[string]bool{}
	for _, in := range inputs {
		key := in.Env.Name + "\x00" + string(in.Task)
		if seen[key] {
			continue
		}
		seen[key] = true
		if err := checkInputSize(in); err != nil {
			return err
		}
	}
	return nil
}

// PlanGroup is the rollouts of a submission that share an environment
// and a policy.
type PlanGroup struct {
	Env, Model string
	MaxTurns   int
	Count      int
}

// Plan groups inputs by environment and policy, in first-use order: what
// a submission of them would start, for a dry run.
func Plan(inputs []rollout.Input) []PlanGroup {
	var groups []PlanGroup
	index := map[[2]string]int{}
	for _, in := range inputs {
		key := [2]string{in.Env.Name, in.Policy.Model}
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, PlanGroup{Env: in.Env.Name, Model: in.Policy.Model, MaxTurns: in.Limits.MaxTurns})
		}
		groups[i].Count++
	}
	return groups
}

// Submit checks r, checks that a worker polls the task queue and that the
// set does not exist yet (or, with r.RequestID, that it was submitted by the
// same request), and starts every rollout of r (attempt 0). On a failed
// start, the result counts the rollouts started before it.
func (c *Client) Submit(ctx context.Context, r SubmitRequest) (SubmitResult, error) {
	inputs, err := BuildInputs(r)
	if err != nil {
		return SubmitResult{}, err
	}
	res := SubmitResult{Inputs: inputs}
	stamp, err := r.Stamp()
	if err != nil {
		return res, err
	}
	if r.isDataset() {
		if err := checkGroupAttribute(ctx, c.tc); err != nil {
			return res, err
		}
	}
	pre, err := preflight(ctx, c.tc, r.Set, c.taskQueue, stamp)
	if err != nil {
		return res, err
	}
	for i := range inputs {
		inputs[i].ProgressAttributes = pre.progress
	}
	res.Started, res.Existing, err = startAll(ctx, c.tc, inputs, startSpec{taskQueue: c.taskQueue, stamp: stamp, limit: startConcurrency})
	if err != nil {
		return res, fmt.Errorf("%w (started %d of %d)", err, res.Started, len(inputs))
	}
	return res, nil
}

// workflowStarter is the part of client.Client that starts workflows.
type workflowStarter interface {
	ExecuteWorkflow(ctx context.Context, options tclient.StartWorkflowOptions, workflow any, args ...any) (tclient.WorkflowRun, error)
}

// searchAttributeHint tells what to do when the server does not know the
// rollout search attributes.
const searchAttributeHint = "register the search attributes turnstile sets (`starter setup` does, so does `make devserver`)"

// startSpec is how startAll starts a submission's rollouts.
type startSpec struct {
	taskQueue string
	// stamp, when set, goes into every rollout's memo, and a rollout
	// started before (by the same request: preflight checked) counts as
	// existing instead of failing the submission.
	stamp *SubmitStamp
	limit int
}

// startAll starts every input with bounded concurrency and returns how many
// started and how many existed. The first failure stops the starts not yet
// begun.
func startAll(ctx context.Context, c workflowStarter, inputs []rollout.Input, spec startSpec) (started, existing int, err error) {
	outcome := make([]int8, len(inputs)) // 1 started, 2 existing
	err = fanout.Each(ctx, len(inputs), spec.limit, func(ctx context.Context, i int) error {
		in := inputs[i]
		opts := rollout.StartOptions(in, spec.taskQueue)
		if spec.stamp != nil {
			opts.Memo[MemoSubmit] = *spec.stamp
		}
		_, err := c.ExecuteWorkflow(ctx, opts, rollout.WorkflowName, in)
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		switch {
		case err == nil:
			outcome[i] = 1
		case spec.stamp != nil && errors.As(err, &already):
			outcome[i] = 2
		default:
			return startError(in, opts.ID, err)
		}
		return nil
	})
	for _, o := range outcome {
		switch o {
		case 1:
			started++
		case 2:
			existing++
		}
	}
	return started, existing, err
}

func startError(in rollout.Input, workflowID string, err error) error {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		return fmt.Errorf("set %q already exists: workflow %s was started before; submit under a new --set name: %w", in.Set, workflowID, err)
	case IsRequestTooLarge(err):
		return fmt.Errorf("start rollout %s: Temporal refused its input as too large; repeating the request cannot help: %w", in.RolloutID, err)
	case strings.Contains(strings.ToLower(err.Error()), "search attribute"):
		return fmt.Errorf("start rollout %s: %w; %s", in.RolloutID, err, searchAttributeHint)
	default:
		return fmt.Errorf("start rollout %s: %w", in.RolloutID, err)
	}
}

// preflightResult is what preflight learned.
type preflightResult struct {
	// progress: the namespace has the progress attributes registered, so
	// the rollouts may upsert them (rollout.Input.ProgressAttributes).
	progress bool
}

// preflight checks, before anything starts, that a worker polls the task
// queue and that the set does not exist yet, or (with a stamp) that it was
// submitted by the same request.
func preflight(ctx context.Context, c tclient.Client, set, taskQueue string, stamp *SubmitStamp) (preflightResult, error) {
	var pre preflightResult
	resp, err := c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return pre, fmt.Errorf("describe task queue %s: %w", taskQueue, err)
	}
	if len(resp.GetPollers()) == 0 {
		return pre, &UnavailableError{Msg: fmt.Sprintf("no worker polls task queue %q: start one with `bin/worker` (same TEMPORAL_ADDRESS and %s), then submit again", taskQueue, "TURNSTILE_TASK_QUEUE")}
	}
	count, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: rollout.SetQuery(set)})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "search attribute") {
			return pre, fmt.Errorf("look up set %q: %w; %s", set, err, searchAttributeHint)
		}
		return pre, fmt.Errorf("look up set %q: %w", set, err)
	}
	if pre.progress, err = hasProgressAttributes(ctx, c, set); err != nil {
		return pre, err
	}
	if count.GetCount() == 0 {
		return pre, nil
	}
	if stamp == nil {
		return pre, &ConflictError{Msg: fmt.Sprintf("set %q already exists (%d runs); submit under a new --set name", set, count.GetCount()), Field: "set"}
	}
	return pre, sameSubmission(ctx, c, set, *stamp)
}

// groupAttributeQuery is a query that only a namespace with the group
// ledgers' search attribute accepts.
var groupAttributeQuery = fmt.Sprintf(`WorkflowType=%q AND %s=%q`, rollout.GroupWorkflowName, rollout.SARolloutGroupStatus, rollout.GroupFailed)

// checkGroupAttribute checks, before a dataset starts, that the namespace
// knows the search attribute its groups' ledgers set: without it no ledger
// could start, and no group could retry or complete.
func checkGroupAttribute(ctx context.Context, c workflowCounter) error {
	known, err := knowsAttributes(ctx, c, groupAttributeQuery)
	switch {
	case err != nil:
		return fmt.Errorf("look up group ledgers: %w", err)
	case !known:
		return fmt.Errorf("the namespace lacks the search attribute %s of group ledgers; %s", rollout.SARolloutGroupStatus, searchAttributeHint)
	}
	return nil
}
