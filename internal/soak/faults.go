package soak

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/trainer"
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

// feed starts rollouts until Concurrency are in flight.
func (r *run) feed(ctx context.Context) error { return r.feedUpTo(ctx, r.cfg.Concurrency) }

// feedUpTo starts rollouts until want are in flight: started minus
// finished, as visibility shows them (its lag only under-counts finished
// ones, so the set never overshoots). Each goes to the next environment
// server in turn that is up, as a load balancer would send it: a server
// killed and not yet recovered gets none.
func (r *run) feedUpTo(ctx context.Context, want int) error {
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
	inputs, err := trainer.BuildInputs(trainer.SubmitRequest{Set: r.set, Count: from + n, Envs: r.cfg.Envs, Seed: r.cfg.Seed,
		ModelCallTimeout: r.cfg.ModelCallTimeout, EnvCallTimeout: r.cfg.EnvCallTimeout})
	if err != nil {
		return fmt.Errorf("soak: inputs: %w", err)
	}
	inputs = inputs[from:]
	up := r.st.upEnvs()
	for i := range inputs {
		server := up[(from+i)%len(up)]
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
	if err := sleep.For(ctx, r.cfg.WorkerDownFor); err != nil { // the scheduled downtime, not a wait for an event
		return err
	}
	return r.st.startWorker(ctx, i)
}

// Bounds of the environment server kill's waits: for a checkpoint to
// commit or end, and for the watchdog to declare and recover.
const (
	cutWait     = 5 * time.Minute
	declareWait = 5 * time.Minute
	recoverWait = 10 * time.Minute
)

// killEnv SIGKILLs one of the two environment servers at random. Nothing
// recovers it but the set's watchdog: the server's supervisor brings it
// back at the same address EnvDownFor later, the watchdog declares it dead
// and moves its rollouts back onto it from the newest committed checkpoint.
// The kill waits for a moment with a committed checkpoint and no cut
// under way (a server killed after it prepared a cut leaves the coordinator
// retrying its commit; that is not what this soak is about).
func (r *run) killEnv(ctx context.Context) error {
	r.envFault.Lock()
	defer r.envFault.Unlock()
	if err := stack.WaitFor(ctx, "a committed checkpoint and no cut under way", nil, cutWait, r.killable); err != nil {
		r.cfg.Logf("%s environment server kill skipped: %v", r.since(), err)
		return nil
	}
	i := r.pick(len(r.st.envs))
	r.st.mu.Lock()
	m := r.st.envs[i]
	r.st.mu.Unlock()
	declared, err := r.declarations(ctx, m.url)
	if err != nil {
		// The status query needs a worker: one killed a moment ago may
		// leave it unanswered. The next kill tries again.
		r.cfg.Logf("%s environment server kill skipped: %v", r.since(), err)
		return nil
	}
	r.st.setDown(i, true)
	m.proc.Kill()
	killedAt := time.Now()
	kill := EnvKill{Server: m.url, At: r.since(), at: killedAt}
	r.cfg.Logf("%s SIGKILLed %s (pid %d, %s)", r.since(), m.role, m.proc.PID(), m.url)
	// The supervisor's restart delay; it never brings the server back
	// before the watchdog declared it: an empty server answering at the
	// old address before that would look alive (see docs/testing.md).
	if err := sleep.For(ctx, r.cfg.EnvDownFor); err != nil {
		return err
	}
	if err := stack.WaitFor(ctx, m.role+" declared dead", nil, declareWait, func() bool {
		n, err := r.declarations(ctx, m.url)
		return err == nil && n > declared
	}); err != nil {
		r.problem("%s killed at %s: %v", m.role, kill.At, err)
	}
	if err := r.st.startEnv(ctx, m); err != nil {
		return fmt.Errorf("soak: restart %s: %w", m.role, err)
	}
	kill.Restarted = time.Since(killedAt) + kill.At
	r.cfg.Logf("%s %s restarted at %s by its supervisor", r.since(), m.role, m.listen)
	r.mu.Lock()
	r.report.EnvKills = append(r.report.EnvKills, kill)
	r.mu.Unlock()
	err = stack.WaitFor(ctx, m.role+"'s rollouts recovered", nil, recoverWait, func() bool {
		done, err := r.recovered(ctx, m.url, declared)
		return err == nil && done
	})
	r.st.setDown(i, false)
	if err != nil {
		r.problem("%s killed at %s: %v", m.role, kill.At, err)
	}
	return nil
}

// netFault injects one network fault on one of the proxies, partitions
// and slow links in turn, and heals it after its time.
func (r *run) netFault(ctx context.Context) error {
	r.envFault.Lock()
	defer r.envFault.Unlock()
	proxies := r.st.proxies()
	names := []string{"env-0", "env-1", "policy"}
	i := r.pick(len(proxies))
	p := proxies[i]
	r.mu.Lock()
	f := NetFault{Kind: "partition", Proxy: names[i], At: r.since(), For: r.cfg.PartitionFor}
	if len(r.report.NetFaults)%2 == 1 {
		f.Kind, f.For = "slow", r.cfg.SlowFor
	}
	r.mu.Unlock()
	var err error
	if f.Kind == "partition" {
		err = p.Hang()
	} else {
		err = p.SlowAndFlaky(r.cfg.SlowLatency, r.cfg.SlowJitter, 2*time.Second, r.cfg.ResetShare)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("soak: %s of %s: %w", f.Kind, f.Proxy, err), p.Heal())
	}
	r.cfg.Logf("%s network fault: %s of %s for %s", r.since(), f.Kind, f.Proxy, f.For)
	r.mu.Lock()
	r.report.NetFaults = append(r.report.NetFaults, f)
	r.mu.Unlock()
	werr := sleep.For(ctx, f.For) // the fault's length, not a wait for an event
	if err := p.Heal(); err != nil {
		return fmt.Errorf("soak: heal %s: %w", f.Proxy, err)
	}
	return werr
}
