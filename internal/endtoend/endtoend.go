// Package endtoend is the conformance kit's last stage: a small set of
// rollouts through the real coordinator on the participant under test, so a
// participant the kit passes is shown to work with it, not only to answer
// each rule. It starts its own Temporal dev server, scripted policy server
// and worker (package stack), runs the set once uninterrupted, runs it again
// and takes a checkpoint mid-flight, SIGKILLs everything it started (and
// deletes the transcripts), restores the checkpoint on fresh processes under
// the default restore id (the live rollback of RULES.md R18 on the
// participant that took the checkpoint) and wants every rollout to end once
// with the result of the uninterrupted run.
//
// It needs the binaries worker and policyserver, the Temporal CLI and
// temporal-dev.yaml, so it runs behind bin/conformance --end-to-end and in
// the integration tests.
package endtoend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// DefaultRollouts is the size of the set.
const DefaultRollouts = 4

// readyTimeout bounds how long a process may take to become ready.
const readyTimeout = 2 * time.Minute

// Config says where the stage finds its programs and puts its files.
type Config struct {
	// BinDir holds the worker and policyserver binaries.
	BinDir string
	// TemporalCLI is the Temporal CLI; DevConfig its temporal-dev.yaml.
	TemporalCLI, DevConfig string
	// WorkDir takes the processes' logs and the transcript store.
	WorkDir string
	// Rollouts is the size of the set (0: DefaultRollouts).
	Rollouts int
}

// Stage is the kit's end-to-end stage with c's settings.
func (c Config) Stage() conformance.EndToEnd {
	return func(ctx context.Context, p conformance.Target) (string, error) {
		if err := c.Check(); err != nil {
			return "", err
		}
		r := &run{cfg: c, p: p, launch: &stack.Launcher{Dir: c.WorkDir}}
		defer r.stop()
		return r.all(ctx)
	}
}

// Check says what the stage lacks to run: a binary, the Temporal CLI,
// temporal-dev.yaml or a work directory.
func (c Config) Check() error {
	for _, f := range []struct{ what, path string }{
		{"worker", filepath.Join(c.BinDir, "worker")}, {"policyserver", filepath.Join(c.BinDir, "policyserver")},
		{"the Temporal CLI", c.TemporalCLI}, {"temporal-dev.yaml", c.DevConfig},
	} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("the end-to-end stage needs %s: %w", f.what, err)
		}
	}
	if c.WorkDir == "" {
		return errors.New("the end-to-end stage needs a work directory")
	}
	return nil
}

// run is one stage: its processes and what it learnt.
type run struct {
	cfg    Config
	p      conformance.Target
	launch *stack.Launcher
	// The processes of the current incarnation of the stack.
	temporal, policy, worker *stack.Proc
	tc                       tclient.Client
	modelURL, store          string
	incarnation              int
}

func (r *run) stop() {
	if r.tc != nil {
		r.tc.Close()
	}
	r.launch.StopAll(10 * time.Second)
}

func (r *run) rollouts() int {
	if r.cfg.Rollouts > 0 {
		return r.cfg.Rollouts
	}
	return DefaultRollouts
}

// all runs the stage and returns its evidence.
func (r *run) all(ctx context.Context) (string, error) {
	if err := r.up(ctx); err != nil {
		return "", err
	}
	ts := trainer.New(r.tc, rollout.TaskQueue)
	base, err := r.submit(ctx, ts, r.p.Prefix+"-base")
	if err != nil {
		return "", err
	}
	want, err := r.finish(ctx, ts, r.p.Prefix+"-base", base)
	if err != nil {
		return "", fmt.Errorf("the uninterrupted run: %w", err)
	}
	set := r.p.Prefix + "-cut"
	inputs, err := r.submit(ctx, ts, set)
	if err != nil {
		return "", err
	}
	busy, err := r.midFlight(ctx, set)
	if err != nil {
		return "", err
	}
	ckpt := r.p.Prefix + "-k1"
	root := filepath.Join(r.p.Dir, "end-to-end")
	cp, err := ts.Checkpoint(ctx, trainer.CheckpointRequest{Set: set, CheckpointID: ckpt, Root: root,
		Participants: []string{r.p.URL}, Timeout: time.Minute}, true)
	if err != nil {
		return "", fmt.Errorf("checkpoint %s of set %s through the coordinator: %w", ckpt, set, err)
	}
	if err := r.killAll(); err != nil {
		return "", err
	}
	if err := r.up(ctx); err != nil {
		return "", err
	}
	ts = trainer.New(r.tc, rollout.TaskQueue)
	res, err := ts.Restore(ctx, trainer.RestoreRequest{CheckpointID: ckpt, Root: root, Participants: []string{r.p.URL}}, true)
	if err != nil {
		return "", fmt.Errorf("restore of checkpoint %s (restore id %s, the default) onto the live participant: %w", ckpt, ckpt, err)
	}
	got, err := r.finish(ctx, ts, set, inputs)
	if err != nil {
		return "", fmt.Errorf("after the restore: %w", err)
	}
	if err := same(want, got); err != nil {
		return "", fmt.Errorf("after the restore: %w", err)
	}
	return fmt.Sprintf("%d rollouts of %s: checkpoint %s mid-flight (%d with a session in progress at the cut; %d members, %d parked); worker, policy server and dev server SIGKILLed, transcripts deleted; restore on fresh processes under the default restore id (%d continue, %d start over, %d offer their result again); every rollout ended once with the reward and turns of the uninterrupted run",
		len(inputs), r.p.Env, ckpt, busy, cp.Members, cp.Parked, res.Restored, res.StartedOver, res.OfferedAgain), nil
}

// up starts a fresh dev server, policy server and worker.
func (r *run) up(ctx context.Context) error {
	r.incarnation++
	var (
		err      error
		hostPort string
	)
	r.temporal, hostPort, r.tc, err = r.launch.StartTemporal(ctx, stack.Temporal{CLI: r.cfg.TemporalCLI, DevConfig: r.cfg.DevConfig}, readyTimeout)
	if err != nil {
		return fmt.Errorf("start the Temporal dev server: %w", err)
	}
	// A slow model keeps rollouts between turns when the cut comes; the
	// answers depend only on the messages and the seed.
	r.policy, r.modelURL, err = r.launch.StartServer(ctx, "policyserver", filepath.Join(r.cfg.BinDir, "policyserver"),
		[]string{"--listen", "127.0.0.1:0", "--latency", "300ms", "--log-level", "warn"}, nil, stack.PolicyHealth, readyTimeout)
	if err != nil {
		return fmt.Errorf("start the policy server: %w", err)
	}
	r.store = filepath.Join(r.cfg.WorkDir, fmt.Sprintf("transcripts-%d", r.incarnation))
	env := stack.WorkerEnv{HostPort: hostPort, EnvURL: r.p.URL, ModelURL: r.modelURL, Store: r.store,
		ControlToken: r.p.ControlToken, DataToken: r.p.DataToken}.Environ()
	if r.worker, err = r.launch.Start("worker", filepath.Join(r.cfg.BinDir, "worker"), nil, env...); err != nil {
		return err
	}
	return stack.WaitFor(ctx, "worker polling", r.worker, readyTimeout, func() bool { return r.polled(ctx) })
}

// polled says whether a worker polls the rollout task queue.
func (r *run) polled(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := r.tc.DescribeTaskQueue(ctx, rollout.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && len(resp.GetPollers()) > 0
}

// killAll SIGKILLs everything the stage started and deletes the
// transcripts: only the checkpoint directory (and the participant) remain.
func (r *run) killAll() error {
	r.tc.Close()
	r.tc = nil
	for _, p := range []*stack.Proc{r.worker, r.policy, r.temporal} {
		p.Kill()
	}
	if err := os.RemoveAll(r.store); err != nil {
		return fmt.Errorf("delete the transcripts: %w", err)
	}
	return nil
}

func (r *run) submit(ctx context.Context, ts *trainer.Client, set string) ([]rollout.Input, error) {
	res, err := ts.Submit(ctx, trainer.SubmitRequest{Set: set, Count: r.rollouts(), Envs: []string{r.p.Env}, EnvURL: r.p.URL,
		PolicyEndpoint: destination.DefaultName, Seed: 7})
	if err != nil {
		return nil, fmt.Errorf("submit set %s of %s at %s (the end-to-end stage runs environments the catalog knows): %w", set, r.p.Env, r.p.URL, err)
	}
	return res.Inputs, nil
}

// midFlight waits until at least one rollout of set holds a session in
// progress at the participant (started, an operation applied, not
// verified), and returns how many do.
func (r *run) midFlight(ctx context.Context, set string) (int, error) {
	dc := protocol.NewDataClient(r.p.URL, r.p.DataToken, r.p.HTTPClient)
	busy := 0
	err := stack.WaitFor(ctx, "a rollout of "+set+" in progress", r.worker, readyTimeout, func() bool {
		busy = 0
		for i := range r.rollouts() {
			info, err := dc.Session(ctx, rollout.SubmittedID(set, i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return busy > 0
	})
	return busy, err
}

// outcome is what a rollout ended with, for the comparison.
type outcome struct {
	reward float64
	turns  int
}

// finish waits for set and returns each rollout's outcome by index,
// wanting exactly one completed result per rollout.
func (r *run) finish(ctx context.Context, ts *trainer.Client, set string, inputs []rollout.Input) ([]outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := ts.Wait(ctx, trainer.WaitRequest{Set: set, Inputs: inputs}); err != nil {
		return nil, err
	}
	recs, err := ts.Results(ctx, set)
	if err != nil {
		return nil, err
	}
	byID := map[string]trainer.RolloutRecord{}
	for _, rec := range recs {
		if _, dup := byID[rec.RolloutID]; dup {
			return nil, fmt.Errorf("rollout %s has two results", rec.RolloutID)
		}
		byID[rec.RolloutID] = rec
	}
	out := make([]outcome, len(inputs))
	for i, in := range inputs {
		rec, ok := byID[in.RolloutID]
		if !ok || rec.Result == nil {
			return nil, fmt.Errorf("rollout %s has no result (status %s, %s)", in.RolloutID, rec.Status, rec.Err)
		}
		out[i] = outcome{reward: rec.Result.Reward, turns: rec.Result.Turns}
	}
	return out, nil
}

// same compares the recovered set's outcomes with the uninterrupted run's.
func same(want, got []outcome) error {
	for i := range want {
		if want[i] != got[i] {
			return fmt.Errorf("rollout %d ended with reward %v in %d turns; the uninterrupted run's ended with reward %v in %d turns",
				i, got[i].reward, got[i].turns, want[i].reward, want[i].turns)
		}
	}
	return nil
}
