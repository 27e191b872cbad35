package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/fanout"
	"github.com/turnstile-rl/turnstile/rollout"
)

// Bounds of a submission.
const (
	// maxCount bounds a set: rollout seeds are seed*seedStride+index, so
	// indexes below seedStride keep every rollout's seed distinct.
	maxCount   = 1_000_000
	seedStride = 1_000_000
	// startConcurrency and waitConcurrency bound concurrent StartWorkflow
	// calls and result long-polls.
	startConcurrency = 16
	waitConcurrency  = 128
)

// SubmitRequest is one `starter submit`.
type SubmitRequest struct {
	Set   string
	Count int
	// Envs are the environments of the set; rollout i runs in
	// Envs[i % len(Envs)].
	Envs   []string
	EnvURL string
	// Policy is the model of every rollout; empty means each rollout's
	// environment's scripted policy ("scripted-<env>").
	Policy   string
	ModelURL string
	Seed     int64
	// MaxTurns limits every rollout; 0 means each environment's default
	// (DefaultMaxTurns).
	MaxTurns   int
	RequireAck bool
}

// Validate reports the first field that cannot work, before anything is
// started.
func (r SubmitRequest) Validate() error {
	if err := validateSet(r.Set); err != nil {
		return err
	}
	if r.Count < 1 || r.Count > maxCount {
		return fmt.Errorf("--count %d: want 1..%d", r.Count, maxCount)
	}
	if _, err := ParseEnvs(strings.Join(r.Envs, ",")); err != nil {
		return err
	}
	if r.Policy != strings.TrimSpace(r.Policy) {
		return fmt.Errorf("--policy %q: surrounding spaces", r.Policy)
	}
	if r.MaxTurns < 0 || r.MaxTurns > rollout.MaxMaxTurns {
		return fmt.Errorf("--max-turns %d: want 1..%d, or 0 for each environment's default", r.MaxTurns, rollout.MaxMaxTurns)
	}
	for _, u := range []struct{ flag, value string }{{"--env-url", r.EnvURL}, {"--model-url", r.ModelURL}} {
		if u.value != "" && !strings.HasPrefix(u.value, "http://") && !strings.HasPrefix(u.value, "https://") {
			return fmt.Errorf("%s %q: want an http:// or https:// URL", u.flag, u.value)
		}
	}
	return nil
}

// RolloutID is the id of rollout i of set: "<set>-0007". Zero-padding keeps
// ids sorted in index order for sets below 10,000.
func RolloutID(set string, i int) string { return fmt.Sprintf("%s-%04d", set, i) }

// RolloutSeed is the seed of rollout i of a set seeded with seed.
func RolloutSeed(seed int64, i int) int64 { return seed*seedStride + int64(i) }

// BuildInputs returns the attempt-0 input of every rollout of r, in index
// order: rollout i runs in r.Envs[i % len(r.Envs)], with that environment's
// scripted policy and turn limit unless r sets them. Equal requests give
// equal inputs.
func BuildInputs(r SubmitRequest) ([]rollout.Input, error) {
	if err := r.Validate(); err != nil {
		return nil, err
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
			Env:        rollout.EnvRef{Name: env, URL: r.EnvURL},
			Policy:     rollout.PolicyRef{Model: model, BaseURL: r.ModelURL},
			Seed:       RolloutSeed(r.Seed, i),
			Limits:     rollout.Limits{MaxTurns: maxTurns},
			RequireAck: r.RequireAck,
		}
	}
	return out, nil
}

// MemoEnv is the memo field holding a rollout's environment name.
const MemoEnv = "env"

// StartOptions are the options of attempt 0 of in. The ID policies make a
// second submit of the same set fail instead of running rollouts twice; there
// is no workflow retry policy, because a new attempt is a decision of the
// recovery machinery, not of the server.
func StartOptions(in rollout.Input, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       rollout.WorkflowID(in.RolloutID),
		TaskQueue:                                taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutID).ValueSet(in.RolloutID),
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutSet).ValueSet(in.Set),
			temporal.NewSearchAttributeKeyInt64(rollout.SARolloutAttempt).ValueSet(int64(in.Attempt)),
			temporal.NewSearchAttributeKeyInt64(rollout.SARolloutTurn).ValueSet(0),
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase).ValueSet(string(rollout.PhaseSeeding)),
		),
		// The memo names the environment, so summaries can group rollouts
		// that failed without a result by environment from the listing alone.
		Memo:          map[string]any{MemoEnv: in.Env.Name},
		StaticSummary: fmt.Sprintf("rollout %s · env %s · policy %s · seed %d", in.RolloutID, in.Env.Name, in.Policy.Model, in.Seed),
	}
}

// workflowStarter is the part of client.Client that starts workflows.
type workflowStarter interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
}

// searchAttributeHint tells what to do when the server does not know the
// rollout search attributes.
const searchAttributeHint = "register the search attributes RolloutId, RolloutSet, RolloutPhase (Keyword) and RolloutAttempt, RolloutTurn (Int) — `make devserver` does"

// startAll starts every input with bounded concurrency and returns how many
// started. The first failure stops the starts not yet begun.
func startAll(ctx context.Context, c workflowStarter, inputs []rollout.Input, taskQueue string, limit int) (int, error) {
	started := make([]bool, len(inputs))
	err := fanout.Each(ctx, len(inputs), limit, func(ctx context.Context, i int) error {
		in := inputs[i]
		opts := StartOptions(in, taskQueue)
		if _, err := c.ExecuteWorkflow(ctx, opts, rollout.WorkflowName, in); err != nil {
			return startError(in, opts.ID, err)
		}
		started[i] = true
		return nil
	})
	n := 0
	for _, ok := range started {
		if ok {
			n++
		}
	}
	return n, err
}

func startError(in rollout.Input, workflowID string, err error) error {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		return fmt.Errorf("set %q already exists: workflow %s was started before; submit under a new --set name: %w", in.Set, workflowID, err)
	case strings.Contains(strings.ToLower(err.Error()), "search attribute"):
		return fmt.Errorf("start rollout %s: %w; %s", in.RolloutID, err, searchAttributeHint)
	default:
		return fmt.Errorf("start rollout %s: %w", in.RolloutID, err)
	}
}

// preflight checks, before anything starts, that a worker polls the task
// queue and that the set does not exist yet.
func preflight(ctx context.Context, c client.Client, set, taskQueue string) error {
	resp, err := c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return fmt.Errorf("describe task queue %s: %w", taskQueue, err)
	}
	if len(resp.GetPollers()) == 0 {
		return fmt.Errorf("no worker polls task queue %q: start one with `bin/worker` (same TEMPORAL_ADDRESS and %s), then submit again", taskQueue, "TURNSTILE_TASK_QUEUE")
	}
	count, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: setQuery(set)})
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "search attribute") {
			return fmt.Errorf("look up set %q: %w; %s", set, err, searchAttributeHint)
		}
		return fmt.Errorf("look up set %q: %w", set, err)
	}
	if count.GetCount() > 0 {
		return fmt.Errorf("set %q already exists (%d runs); submit under a new --set name", set, count.GetCount())
	}
	return nil
}

func newSubmitCmd(g *globals) *cobra.Command {
	var (
		req     SubmitRequest
		envList string
		wait    bool
		dryRun  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Start a set of rollouts (attempt 0 each)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			envNames, err := ParseEnvs(envList)
			if err != nil {
				return err
			}
			req.Envs = envNames
			inputs, err := BuildInputs(req)
			if err != nil {
				return err
			}
			if dryRun {
				return writePlan(cmd.OutOrStdout(), req.Set, inputs)
			}
			ctx := cmd.Context()
			c, addr, err := g.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := preflight(ctx, c, req.Set, g.taskQueue); err != nil {
				return err
			}
			n, err := startAll(ctx, c, inputs, g.taskQueue, startConcurrency)
			if err != nil {
				return fmt.Errorf("%w (started %d of %d)", err, n, len(inputs))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "started %d rollouts of set %s (%s) on task queue %s at %s\n", n, req.Set, strings.Join(req.Envs, ", "), g.taskQueue, addr)
			if !wait {
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if req.RequireAck {
				// Held results keep their runs open: wait until every
				// rollout holds one (or has closed), not until all close.
				if err := awaitHeld(wctx, c, req.Set, len(inputs), newProgress(wctx, cmd.ErrOrStderr(), len(inputs))); err != nil {
					return fmt.Errorf("wait for set %s: %w", req.Set, err)
				}
			} else {
				if err := waitAll(wctx, c, inputs, cmd.ErrOrStderr()); err != nil {
					return fmt.Errorf("wait for set %s: %w", req.Set, err)
				}
				if err := awaitVisibility(wctx, c, req.Set); err != nil {
					return fmt.Errorf("wait for set %s in visibility: %w", req.Set, err)
				}
			}
			recs, err := collectSet(wctx, c, req.Set, true)
			if err != nil {
				return err
			}
			if err := writeSummary(out, req.Set, recs); err != nil {
				return err
			}
			if req.RequireAck {
				fmt.Fprintf(out, "results are held until acknowledged: starter acknowledge --set %s --all-completed (or --receipts FILE)\n", req.Set)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "name of the set (rollout ids are <set>-0000, <set>-0001, …)")
	f.IntVar(&req.Count, "count", 1, "number of rollouts")
	f.StringVar(&envList, "env", "", "environment names, comma-separated; rollouts take them in turn (known: "+strings.Join(catalog.Names(), ", ")+")")
	f.StringVar(&req.EnvURL, "env-url", "", "environment server URL (default: the worker's)")
	f.StringVar(&req.Policy, "policy", "", "policy model name of every rollout (default: scripted-<env> of each rollout's environment)")
	f.StringVar(&req.ModelURL, "model-url", "", "OpenAI-compatible base URL of the policy (default: the worker's)")
	f.Int64Var(&req.Seed, "seed", 0, "set seed; tasks and rollout seeds derive from it")
	f.IntVar(&req.MaxTurns, "max-turns", 0, "model calls per rollout at most (default: per environment, "+maxTurnsDefaults()+")")
	f.BoolVar(&req.RequireAck, "require-ack", false, "hold each result until the pipeline acknowledges it")
	f.BoolVar(&dryRun, "dry-run", false, "check the request and print what would start, without connecting to Temporal")
	f.BoolVar(&wait, "wait", false, "wait for every rollout to close (with --require-ack: to hold its result), with a progress bar, then print the summary")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
	_ = cmd.MarkFlagRequired("set")
	_ = cmd.MarkFlagRequired("env")
	return cmd
}

// writePlan prints what a submit of inputs would start: one line per
// environment with its rollout count, policy and turn limit, in first-use
// order.
func writePlan(w io.Writer, set string, inputs []rollout.Input) error {
	type group struct {
		env, model string
		maxTurns   int
		count      int
	}
	var groups []*group
	index := map[[2]string]*group{}
	for _, in := range inputs {
		key := [2]string{in.Env.Name, in.Policy.Model}
		g := index[key]
		if g == nil {
			g = &group{env: in.Env.Name, model: in.Policy.Model, maxTurns: in.Limits.MaxTurns}
			index[key] = g
			groups = append(groups, g)
		}
		g.count++
	}
	fmt.Fprintf(w, "would start %d rollouts of set %s:\n", len(inputs), set)
	for _, g := range groups {
		fmt.Fprintf(w, "  %d × %s, policy %s, max turns %d\n", g.count, g.env, g.model, g.maxTurns)
	}
	return nil
}

// progress counts closed rollouts for a reader.
type progress interface {
	Increment()
	// Finish ends the display; ok is false when the wait failed.
	Finish(ok bool)
}

// newProgress is a progress bar on a terminal, and plain lines elsewhere (a
// log file, a pipe), where a bar would print nothing until the end.
func newProgress(ctx context.Context, w io.Writer, total int) progress {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p := mpb.NewWithContext(ctx, mpb.WithOutput(w), mpb.WithWidth(40))
			bar := p.AddBar(int64(total),
				mpb.PrependDecorators(decor.Name("rollouts "), decor.CountersNoUnit("%d/%d")),
				mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Elapsed(decor.ET_STYLE_GO, decor.WCSyncSpace)),
			)
			return &barProgress{p: p, bar: bar}
		}
	}
	return &lineProgress{w: w, total: total}
}

type barProgress struct {
	p   *mpb.Progress
	bar *mpb.Bar
}

func (b *barProgress) Increment() { b.bar.Increment() }

func (b *barProgress) Finish(ok bool) {
	if !ok {
		b.bar.Abort(false)
	}
	b.p.Wait()
}

// lineProgress prints "closed k/N rollouts" each time another tenth of the
// set has closed, so a log shows progress without a line per rollout.
type lineProgress struct {
	w      io.Writer
	total  int
	mu     sync.Mutex
	closed int
}

// lineSteps is how many lines a full lineProgress prints.
const lineSteps = 10

func (l *lineProgress) Increment() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed++
	if l.closed*lineSteps/l.total != (l.closed-1)*lineSteps/l.total {
		fmt.Fprintf(l.w, "closed %d/%d rollouts\n", l.closed, l.total)
	}
}

func (l *lineProgress) Finish(bool) {}

// waitAll waits until every rollout's workflow ID has closed (following new
// runs and attempts), showing progress on w.
func waitAll(ctx context.Context, c client.Client, inputs []rollout.Input, w io.Writer) error {
	bar := newProgress(ctx, w, len(inputs))
	err := fanout.Each(ctx, len(inputs), waitConcurrency, func(ctx context.Context, i int) error {
		err := c.GetWorkflow(ctx, rollout.WorkflowID(inputs[i].RolloutID), "").Get(ctx, nil)
		var wee *temporal.WorkflowExecutionError
		if err != nil && !errors.As(err, &wee) {
			return fmt.Errorf("rollout %s: %w", inputs[i].RolloutID, err)
		}
		bar.Increment() // completed or failed: closed either way
		return nil
	})
	bar.Finish(err == nil)
	return err
}

// visibilityPoll is how often awaitVisibility asks again.
const visibilityPoll = 200 * time.Millisecond

// awaitVisibility waits until visibility, which lags the workflows, no longer
// lists a running rollout of set, so the summary that follows counts them all.
func awaitVisibility(ctx context.Context, c client.Client, set string) error {
	q := setQuery(set) + ` AND ExecutionStatus="Running"`
	t := time.NewTicker(visibilityPoll)
	defer t.Stop()
	for {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err != nil {
			return err
		}
		if resp.GetCount() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// workflowCounter is the counting part of client.Client.
type workflowCounter interface {
	CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
}

// heldQuery matches the rollouts of set still working towards a result: open
// and not holding one for acknowledgement.
func heldQuery(set string) string {
	return fmt.Sprintf(`%s AND ExecutionStatus="Running" AND %s!=%q`, setQuery(set), rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
}

// awaitHeld waits (polling visibility) until none of the total rollouts of
// set is still working: each holds its result for acknowledgement or has
// closed. Visibility lags the starts, so a count is trusted only once the
// set is listed whole. Progress counts the rollouts done.
func awaitHeld(ctx context.Context, c workflowCounter, set string, total int, bar progress) error {
	count := func(q string) (int, error) {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		return int(resp.GetCount()), err
	}
	t := time.NewTicker(visibilityPoll)
	defer t.Stop()
	shown := 0
	for {
		listed, err := count(setQuery(set))
		if err != nil {
			bar.Finish(false)
			return err
		}
		working, err := count(heldQuery(set))
		if err != nil {
			bar.Finish(false)
			return err
		}
		if listed >= total {
			for ; shown < total-working; shown++ {
				bar.Increment()
			}
			if working == 0 {
				bar.Finish(true)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			bar.Finish(false)
			return ctx.Err()
		case <-t.C:
		}
	}
}
