package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// feedEvery is how often the feeder tops the set up to its concurrency.
const feedEvery = 2 * time.Second

// startConcurrency bounds concurrent workflow starts of the feeder.
const startConcurrency = 16

// closedQuery selects the runs of a set that have ended for good.
const closedQuery = "ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'"

// finishedQuery selects the runs that ended a rollout: closed, but not
// terminated (the runs a recovery replaces are terminated, and their
// rollouts run on as a higher attempt). A rollout has at most one.
const finishedQuery = closedQuery + " AND ExecutionStatus != 'Terminated'"

// primeRollouts is how many rollouts run while the soak takes its first
// checkpoint (see prime).
const primeRollouts = 50

// feed starts rollouts until Concurrency are in flight.
func (r *run) feed(ctx context.Context) error { return r.feedUpTo(ctx, r.cfg.Concurrency) }

// prime starts a first batch of rollouts and takes a checkpoint of them
// before the full load, when environment server kills are on. Scoped
// recovery needs a committed checkpoint, and on a starved machine no cut
// of the full load may commit: parking 1,000 rollouts whose workflow tasks
// queue for a minute misses its deadline, and every later kill would be
// skipped. A rollout started after this cut and moved by a recovery starts
// over on the replacement, as scoped recovery does for any such rollout.
func (r *run) prime(ctx context.Context) error {
	if r.cfg.EnvKillEvery == 0 {
		return nil
	}
	if err := r.feedUpTo(ctx, min(r.cfg.Concurrency, primeRollouts)); err != nil {
		return err
	}
	return r.checkpoint(ctx)
}

// feedUpTo starts rollouts until want are in flight: started minus
// finished, as visibility shows them (its lag only under-counts finished
// ones, so the set never overshoots). Not closed: that count is zero while
// any run is running (see closed), which fed nothing after the first
// batch until the whole set had ended.
func (r *run) feedUpTo(ctx context.Context, want int) error {
	r.envSwap.RLock()
	defer r.envSwap.RUnlock()
	finished, err := r.count(ctx, finishedQuery)
	if err != nil {
		return err
	}
	r.mu.Lock()
	from := r.submitted
	r.mu.Unlock()
	n := min(want-(from-finished), r.cfg.MaxRollouts-from)
	if n <= 0 {
		return nil
	}
	inputs, err := trainer.BuildInputs(trainer.SubmitRequest{Set: r.set, Count: from + n, Envs: r.cfg.Envs, Seed: r.cfg.Seed})
	if err != nil {
		return fmt.Errorf("soak: inputs: %w", err)
	}
	inputs = inputs[from:]
	for i := range inputs {
		server := (from + i) % 2
		inputs[i].Env.URL = r.st.envURL(server)
		r.mu.Lock()
		r.serverOf[inputs[i].RolloutID] = server
		r.mu.Unlock()
	}
	err = fanout.Each(ctx, len(inputs), startConcurrency, func(ctx context.Context, i int) error {
		_, err := r.st.tc.ExecuteWorkflow(ctx, rollout.StartOptions(inputs[i], rollout.TaskQueue), rollout.WorkflowName, inputs[i])
		return err
	})
	if err != nil {
		return fmt.Errorf("soak: start rollouts %d–%d: %w", from, from+n-1, err)
	}
	r.mu.Lock()
	r.submitted += n
	r.report.Started = r.submitted
	r.mu.Unlock()
	return nil
}

// closed counts the set's runs that have ended for good, and zero while
// any still runs: a recovery ends the runs it replaces, so closed runs may
// outnumber the rollouts while some still run. The drain waits on it.
func (r *run) closed(ctx context.Context) (int, error) {
	running, err := r.count(ctx, "ExecutionStatus = 'Running'")
	if err != nil || running > 0 {
		return 0, err
	}
	return r.count(ctx, closedQuery)
}

// count counts the set's runs that match q, as visibility shows them.
func (r *run) count(ctx context.Context, q string) (int, error) {
	resp, err := r.st.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: rollout.SetQuery(r.set) + " AND " + q})
	if err != nil {
		return 0, fmt.Errorf("soak: count rollouts: %w", err)
	}
	return int(resp.GetCount()), nil
}

// checkpoint takes one checkpoint of the set and waits for it. A failed
// checkpoint (its cut missed the deadline, say, because a worker died
// under it) is counted and printed, not an invariant violation; when its
// abort failed too (checkpoint.CleanupFailed) the soak resumes it as an
// operator would, and the end checks cover the rollouts.
func (r *run) checkpoint(ctx context.Context) error {
	r.mu.Lock()
	id := fmt.Sprintf("%s-cp%03d", r.set, len(r.report.Checkpoints)+1)
	r.mu.Unlock()
	r.cutOrKill.Lock()
	defer r.cutOrKill.Unlock()
	began := time.Now()
	parts := r.st.envURLs()
	res, err := r.ts.Checkpoint(ctx, trainer.CheckpointRequest{
		Set: r.set, CheckpointID: id, Root: r.root, Participants: parts, Timeout: r.cfg.CheckpointTimeout,
	}, true)
	cp := Checkpoint{ID: id, Took: time.Since(began)}
	switch {
	case err != nil && strings.Contains(err.Error(), checkpoint.CleanupFailed):
		cp.Err = err.Error()
		cp.Resumed = r.resume(ctx, id, parts)
	case err != nil:
		// The abort released every rollout and reachable participant; an
		// operator's resume, by update on a busy data plane, would only
		// hold up the next checkpoint for minutes (a soak saw it).
		cp.Err = err.Error()
	default:
		cp.Members, cp.Parked = res.Members, res.Parked
	}
	r.mu.Lock()
	r.report.Checkpoints = append(r.report.Checkpoints, cp)
	if err == nil {
		r.lastCP = id
	}
	r.mu.Unlock()
	r.cfg.Logf("%s checkpoint %s: %d members, %d parked, %s %s", r.since(), id, cp.Members, cp.Parked, cp.Took.Round(time.Millisecond), cp.Err)
	return nil
}

// resume releases a failed checkpoint's participants and rollouts (what
// its error tells an operator to do) and returns how many rollouts it
// sent the resume; a resume that fails leaves rollouts parked: a problem.
// Only the participants still running are resumed: one SIGKILLed while
// the checkpoint ran holds nothing (its replacement never took part), and
// its dead address would fail the resume as it failed the abort.
func (r *run) resume(ctx context.Context, id string, parts []string) int {
	live := r.st.envURLs()
	parts = slices.DeleteFunc(slices.Clone(parts), func(u string) bool { return !slices.Contains(live, u) })
	sum, err := r.ts.Resume(ctx, trainer.ResumeRequest{Set: r.set, CheckpointID: id, Participants: parts, ControlToken: controlToken})
	if err != nil {
		r.problem("resume of failed checkpoint %s: %v", id, err)
	}
	return sum.Rollouts
}

// killWorker SIGKILLs one of the two workers at random; its work moves to
// the survivor. It restarts WorkerDownFor later.
func (r *run) killWorker(ctx context.Context) error {
	i := r.pick(len(r.st.workers))
	r.st.mu.Lock()
	p := r.st.workers[i].proc
	r.st.mu.Unlock()
	p.Kill()
	r.mu.Lock()
	r.report.WorkerKills++
	r.mu.Unlock()
	r.cfg.Logf("%s SIGKILLed worker-%d (pid %d)", r.since(), i, p.PID())
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.cfg.WorkerDownFor): // the scheduled downtime, not a wait for an event
	}
	return r.st.startWorker(ctx, i)
}

// killEnv SIGKILLs one of the two environment servers at random, starts a
// replacement at a new address and recovers the killed server's rollouts
// onto it from the last checkpoint; new rollouts go to the replacement.
func (r *run) killEnv(ctx context.Context) error {
	r.mu.Lock()
	last := r.lastCP
	r.mu.Unlock()
	if last == "" {
		// Scoped recovery moves rollouts back to a committed checkpoint;
		// before the first one there is nothing to recover from.
		r.cfg.Logf("%s environment server kill skipped: no checkpoint committed since the start or the last recovery", r.since())
		return nil
	}
	r.cutOrKill.Lock()
	defer r.cutOrKill.Unlock()
	r.envSwap.Lock()
	defer r.envSwap.Unlock()
	i := r.pick(len(r.st.envs))
	r.st.mu.Lock()
	old := r.st.envs[i]
	r.st.mu.Unlock()
	old.proc.Kill()
	repl, err := r.st.startEnv(ctx, i)
	if err != nil {
		return fmt.Errorf("soak: replace env-%d: %w", i, err)
	}
	repl.killed = true
	r.st.mu.Lock()
	r.st.envs[i] = repl
	r.st.mu.Unlock()
	r.mu.Lock()
	r.report.EnvKills++
	req := recoverRequest{Set: r.set, Server: old.url, Replacement: repl.url, Checkpoint: r.lastCP, Root: r.root,
		RequestID: fmt.Sprintf("%s-recover-%d", r.set, r.report.EnvKills)}
	// That checkpoint names the killed server, not its replacement: the
	// replacement can be recovered only from a checkpoint committed after
	// it started (a second kill of env-0 recovering from the same one
	// failed its plan with "has no participant"), so kills wait for one.
	r.lastCP = ""
	r.mu.Unlock()
	r.cfg.Logf("%s SIGKILLed env-%d (%s); recovering onto %s from %s", r.since(), i, old.url, repl.url, req.Checkpoint)
	if err := recoverServer(ctx, r.ts, req); err != nil {
		return fmt.Errorf("soak: recover env-%d: %w", i, err)
	}
	return nil
}
