package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func newSubmitCmd(g *globals) *cobra.Command {
	var (
		req     trainer.SubmitRequest
		envList string
		wait    bool
		dryRun  bool
		timeout time.Duration
		tasks   string
		samp    samplingFlags
		retries int
		auto    autoRecoverFlags
	)
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Start a set of rollouts (attempt 0 each)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := fillMode(cmd, &req, envList, tasks)
			if err != nil {
				return err
			}
			if err := declare(cmd.Context(), &req); err != nil {
				return err
			}
			if cmd.Flags().Changed("group-retries") {
				req.GroupRetries = &retries
			}
			if req.AutoRecover, err = auto.settings(); err != nil {
				return cli.Usage(err)
			}
			if req.Sampling, err = samp.sampling(cmd); err != nil {
				return cli.Usage(err)
			}
			if dryRun {
				inputs, err := trainer.BuildInputs(req)
				if err != nil {
					return err
				}
				return writePlan(cmd.OutOrStdout(), req.Set, inputs)
			}
			if err := req.Validate(); err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *trainer.Client) error {
				return submit(cmd, c, req, submitWait{wait: wait, timeout: timeout, addr: g.addr})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Set, "set", "", "name of the set (rollout ids are <set>-0000, <set>-0001, …)")
	f.IntVar(&req.Count, "count", 1, "number of rollouts")
	f.StringVar(&tasks, "tasks", "", "JSONL dataset, one task per row (see README, \"Dataset format\"); instead of --count/--seed; with --env ENV, one task JSON of ENV per line (ENV may be one the --env-server declares, see docs/environments.md)")
	f.IntVar(&req.Repeats, "repeats", 1, "with --tasks: rollouts per row, one group (rollout ids <set>-<row id>-r<repeat>)")
	f.IntVar(&retries, "group-retries", rollout.DefaultGroupRetries, "with --tasks: environment failures (refusal, crashed session, deadline in an environment call) a group retries as new attempts, over all its rollouts, before the whole group fails")
	f.StringVar(&envList, "env", "", "environment names, comma-separated; rollouts take them in turn (known: "+strings.Join(catalog.Names(), ", ")+")")
	f.StringVar(&req.EnvServer, "env-server", "", "name of one of the workers' configured environment servers (TURNSTILE_ENV_SERVERS; default: the workers' default)")
	f.StringVar(&req.EnvURL, "env-url", "", "environment server URL, admitted by the workers only if configured or allowlisted (TURNSTILE_ALLOWED_ENV_URLS)")
	f.StringVar(&req.Policy, "policy", "", "policy model name of every rollout (default: scripted-<env> of each rollout's environment)")
	f.StringVar(&req.PolicyEndpoint, "policy-endpoint", "", "name of one of the workers' configured model endpoints (TURNSTILE_MODEL_ENDPOINTS; default: the workers' default)")
	f.StringVar(&req.ModelURL, "model-url", "", "OpenAI-compatible base URL of the policy, admitted by the workers only if configured or allowlisted (TURNSTILE_ALLOWED_MODEL_URLS)")
	f.Int64Var(&req.Seed, "seed", 0, "set seed; tasks and rollout seeds derive from it")
	f.IntVar(&req.MaxTurns, "max-turns", 0, "model calls per rollout at most (default: per environment, "+catalog.TurnLimits()+")")
	f.DurationVar(&req.ModelCallTimeout, "model-timeout", rollout.DefaultModelCallTimeout, "budget of one attempt of a model call")
	f.DurationVar(&req.EnvCallTimeout, "env-timeout", rollout.DefaultEnvCallTimeout, "budget of one attempt of an environment call (a timed-out attempt is retried)")
	f.IntVar(&req.ModelCallRetries, "model-retries", 0, "attempts of one model call at most before the rollout fails with BudgetExhausted (0 = unlimited)")
	f.DurationVar(&req.Deadline, "deadline", 0, "wall-clock budget of each rollout from its first start, parked and restored time included; then it fails with BudgetExhausted (0 = none)")
	f.BoolVar(&req.RequireAck, "require-ack", false, "hold each result until the pipeline acknowledges it")
	f.IntVar(&req.MaxInFlight, "max-in-flight", trainer.DefaultMaxInFlight, "rollouts of the set running at once; the set's admission starts the others in order as these finish (a dataset's groups whole). Change it while the set runs with starter admission")
	f.StringVar(&req.RequestID, "request-id", "", "make the submission idempotent: submitted again with the same id (after a crash), it queues only what is missing")
	samp.register(f)
	auto.register(f)
	f.BoolVar(&dryRun, "dry-run", false, "check the request and print what would start, without connecting to Temporal")
	f.BoolVar(&wait, "wait", false, "wait for every rollout to close (with --require-ack: to hold its result), with a progress bar, then print the summary")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
	_ = cmd.MarkFlagRequired("set")
	cmd.MarkFlagsMutuallyExclusive("tasks", "count")
	cmd.MarkFlagsMutuallyExclusive("tasks", "seed")
	return cmd
}

// fillMode completes req for one of the two modes: --count rollouts of
// --env, or the rows of the --tasks dataset, each --repeats times.
func fillMode(cmd *cobra.Command, req *trainer.SubmitRequest, envList, tasks string) error {
	if tasks == "" {
		if cmd.Flags().Changed("repeats") {
			return cli.Usage(errors.New("--repeats needs --tasks"))
		}
		req.Repeats = 0
		envNames, err := trainer.ParseEnvs(envList)
		if err != nil {
			return err
		}
		req.Envs = envNames
		return nil
	}
	req.Count = 0
	f, err := os.Open(tasks)
	if err != nil {
		return fmt.Errorf("--tasks: %w", err)
	}
	defer f.Close()
	var rows []trainer.DatasetRow
	if envList != "" {
		if strings.Contains(envList, ",") || strings.TrimSpace(envList) != envList {
			return cli.Usage(fmt.Errorf("--env %q with --tasks: name one environment, the one every task of the file is for", envList))
		}
		rows, err = trainer.ReadTasks(f, envList)
	} else {
		rows, err = trainer.ReadDataset(f)
	}
	if err != nil {
		return fmt.Errorf("--tasks %s: %w", tasks, err)
	}
	req.Rows = rows
	return nil
}

// declare asks the request's environment server what it serves when the
// request names environments that are not in the catalog
// (trainer.Declare), with the data token the workers send it: the
// starter reads the workers' settings (TURNSTILE_ENV_URL,
// TURNSTILE_ENV_SERVERS, TURNSTILE_DATA_TOKEN[_<NAME>]).
func declare(ctx context.Context, req *trainer.SubmitRequest) error {
	if len(req.ForeignEnvs()) == 0 {
		return nil
	}
	dest, err := workers.EnvDestinations(os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return trainer.Declare(ctx, req, dest, &http.Client{})
}

// submitWait is how `starter submit` waits for its set, and the address
// it names.
type submitWait struct {
	wait    bool
	timeout time.Duration
	addr    string
}

// submit starts req's set and, when asked, waits for it and prints its
// summary.
func submit(cmd *cobra.Command, c *trainer.Client, req trainer.SubmitRequest, w submitWait) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	res, err := c.Submit(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "submitted %d rollouts of set %s (%s) on task queue %s at %s; at most %d run at once, the others wait queued\n",
		res.Started+res.Existing, req.Set, describeMode(req), c.TaskQueue(), w.addr, res.MaxInFlight)
	if res.Watchdog != nil {
		fmt.Fprintf(out, "automatic recovery on: watchdog %s watches %d environment servers\n", res.Watchdog.WorkflowID, len(req.AutoRecover.Participants))
	}
	if res.Existing > 0 {
		fmt.Fprintf(out, "%d of them were queued before, by an earlier submission of request %s\n", res.Existing, req.RequestID)
	}
	if !w.wait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	bar := newProgress(wctx, cmd.ErrOrStderr(), len(res.Inputs))
	if err := c.Wait(wctx, trainer.WaitRequest{Set: req.Set, Inputs: res.Inputs, RequireAck: req.RequireAck, Progress: bar}); err != nil {
		return err
	}
	sum, err := c.Summary(wctx, req.Set)
	if err != nil {
		return err
	}
	if err := writeSummary(out, req.Set, sum); err != nil {
		return err
	}
	if req.RequireAck {
		fmt.Fprintf(out, "results are held until acknowledged: starter acknowledge --set %s --all-completed (or --receipts FILE)\n", req.Set)
	}
	return nil
}

// describeMode names what a submission draws from: its environments, or
// its dataset's rows and repeats.
func describeMode(req trainer.SubmitRequest) string {
	if req.Rows != nil {
		return fmt.Sprintf("%d rows × %d repeats", len(req.Rows), req.Repeats)
	}
	return strings.Join(req.Envs, ", ")
}

// writePlan prints what a submit of inputs would start: one line per
// environment and policy (trainer.Plan).
func writePlan(w io.Writer, set string, inputs []rollout.Input) error {
	fmt.Fprintf(w, "would start %d rollouts of set %s:\n", len(inputs), set)
	for _, g := range trainer.Plan(inputs) {
		fmt.Fprintf(w, "  %d × %s, policy %s, max turns %d\n", g.Count, g.Env, g.Model, g.MaxTurns)
	}
	if len(inputs) > 0 && inputs[0].GroupSize > 0 {
		in := inputs[0]
		budget := rollout.DefaultGroupRetries
		if in.Limits.GroupRetries != nil {
			budget = *in.Limits.GroupRetries
		}
		fmt.Fprintf(w, "  in %d groups of %d, each with a retry budget of %d\n", len(inputs)/in.GroupSize, in.GroupSize, budget)
	}
	return nil
}

// newProgress is a progress bar on a terminal, and plain lines elsewhere (a
// log file, a pipe), where a bar would print nothing until the end.
func newProgress(ctx context.Context, w io.Writer, total int) trainer.Progress {
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
	return trainer.NewLogProgress(w, total)
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
