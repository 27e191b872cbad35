package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// Bounds of a submission.
const (
	// maxCount bounds a set: rollout seeds are seed*seedStride+index, so
	// indexes below seedStride keep every rollout's seed distinct.
	maxCount   = 1_000_000
	seedStride = 1_000_000
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
	if r.MaxInFlight < 0 || r.MaxInFlight > set.MaxMaxInFlight {
		return fmt.Errorf("--max-in-flight %d: want 1..%d (0: the default, %d)", r.MaxInFlight, set.MaxMaxInFlight, DefaultMaxInFlight)
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
			RolloutID:     RolloutID(r.Set, i),
			Set:           r.Set,
			Attempt:       0,
			Task:          task,
			Env:           rollout.EnvRef{Name: env, URL: r.EnvURL, Server: r.EnvServer},
			Policy:        rollout.PolicyRef{Model: model, BaseURL: r.ModelURL, Endpoint: r.PolicyEndpoint},
			Seed:          RolloutSeed(r.Seed, i),
			Limits:        r.limits(maxTurns),
			Sampling:      r.Sampling,
			RequireAck:    r.RequireAck,
			ProgressEvery: rollout.Duration(r.ProgressEvery),
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
// set does not exist yet (or, with r.RequestID, that it was made by the same
// request), and hands every rollout of r (attempt 0) to the set's
// admission: a workflow of the set's own that starts them in order, at most
// r.MaxInFlight at once, as others finish. The queue lives in Temporal, so
// the rollouts run whatever becomes of this process once Submit returns;
// a Submit cut short is completed by the same request made again. On a
// failure, the result counts the rollouts queued before it.
func (c *Client) Submit(ctx context.Context, r SubmitRequest) (SubmitResult, error) {
	inputs, err := BuildInputs(r)
	if err != nil {
		return SubmitResult{}, err
	}
	res := SubmitResult{Inputs: inputs, MaxInFlight: cmp.Or(r.MaxInFlight, DefaultMaxInFlight)}
	if r.AutoRecover != nil {
		if _, err := r.AutoRecover.WatchdogInput(r.Set, "/", c.taskQueue); err != nil {
			return res, err
		}
	}
	stamp, err := r.admissionStamp()
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
		inputs[i].ResultInStore = pre.receipt
		inputs[i].Admission = true
	}
	res.Started, res.Existing, err = c.enqueue(ctx, enqueueSpec{set: r.Set, inputs: inputs, stamp: stamp, maxInFlight: res.MaxInFlight, resume: pre.resume})
	if err != nil {
		return res, fmt.Errorf("%w (queued %d of %d)", err, res.Started+res.Existing, len(inputs))
	}
	if r.AutoRecover != nil {
		wd, err := c.StartWatchdog(ctx, r.Set, *r.AutoRecover)
		if err != nil {
			return res, fmt.Errorf("automatic recovery of set %s (its rollouts are queued): %w", r.Set, err)
		}
		res.Watchdog = &wd
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

// preflightResult is what preflight learned.
type preflightResult struct {
	// progress: the namespace has the progress attributes registered, so
	// the rollouts may upsert them (rollout.Input.ProgressAttributes).
	progress bool
	// receipt: the namespace has rollout.SARolloutReceipt registered, so
	// held results are stored and named (rollout.Input.ResultInStore).
	receipt bool
	// resume: the set's admission exists, made by the same request: the
	// submission completes it.
	resume bool
}

// preflight checks, before anything starts, that a worker polls the task
// queue and that the set does not exist yet, or that it was submitted by
// the same request (stamp with a request id).
func preflight(ctx context.Context, c tclient.Client, name, taskQueue string, stamp set.SubmitStamp) (preflightResult, error) {
	var pre preflightResult
	resp, err := c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return pre, fmt.Errorf("describe task queue %s: %w", taskQueue, err)
	}
	if len(resp.GetPollers()) == 0 {
		return pre, &UnavailableError{Msg: fmt.Sprintf("no worker polls task queue %q: start one with `bin/worker` (same TEMPORAL_ADDRESS and %s), then submit again", taskQueue, "TURNSTILE_TASK_QUEUE")}
	}
	count, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: rollout.SetQuery(name)})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "search attribute") {
			return pre, fmt.Errorf("look up set %q: %w; %s", name, err, searchAttributeHint)
		}
		return pre, fmt.Errorf("look up set %q: %w", name, err)
	}
	if pre.progress, err = hasProgressAttributes(ctx, c, name); err != nil {
		return pre, err
	}
	if pre.receipt, err = hasReceiptAttribute(ctx, c, name); err != nil {
		return pre, err
	}
	have, found, err := admissionStamp(ctx, c, name)
	if err != nil {
		return pre, err
	}
	if found {
		if err := sameStamp(name, have, stamp); err != nil {
			return pre, err
		}
		pre.resume = true
		return pre, nil
	}
	if count.GetCount() == 0 {
		return pre, nil
	}
	if stamp.RequestID == "" {
		return pre, &ConflictError{Msg: fmt.Sprintf("set %q already exists (%d runs); submit under a new --set name", name, count.GetCount()), Field: "set"}
	}
	// A set submitted before sets had an admission: its rollouts carry
	// the stamp. The same request completes it through an admission (the
	// rollouts it started count as existing).
	return pre, sameSubmission(ctx, c, name, stamp)
}

// admissionStamp reads the stamp of set's admission (running or closed);
// found is false when the set has none.
func admissionStamp(ctx context.Context, c tclient.Client, name string) (set.SubmitStamp, bool, error) {
	desc, err := c.DescribeWorkflow(ctx, set.AdmissionWorkflowID(name), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return set.SubmitStamp{}, false, nil
	}
	if err != nil {
		return set.SubmitStamp{}, false, fmt.Errorf("look up the admission of set %q: %w", name, err)
	}
	var st set.SubmitStamp
	if p, ok := desc.RawResponse.GetWorkflowExecutionInfo().GetMemo().GetFields()[MemoSubmit]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &st)
	}
	return st, true, nil
}

// sameStamp checks that a set made by the submission stamped have may be
// completed by the one stamped want: both carry the same request id and
// digest.
func sameStamp(name string, have, want set.SubmitStamp) error {
	switch {
	case have.RequestID == "":
		return &ConflictError{Msg: fmt.Sprintf("set %q already exists, submitted without a request id; submit under a new set name", name), Field: "set"}
	case have.RequestID != want.RequestID:
		return &ConflictError{Msg: fmt.Sprintf("set %q already exists, submitted by request %q; submit under a new set name", name, have.RequestID), Field: "set"}
	case have.Digest != want.Digest:
		return &ConflictError{Msg: fmt.Sprintf("request id %q was used for set %q with another body; use a new request id", want.RequestID, name), Field: "request_id"}
	}
	return nil
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
