// Package integration_test runs turnstile on real processes: the Temporal dev
// server (the official CLI), the environment server, the scripted policy
// server and workers, on loopback ports. Crash tests SIGKILL them at named
// failpoints and check the invariants of ARCHITECTURE.md.
package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/devenv"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// bins holds the binaries built once for the whole package.
var bins struct {
	dir      string
	temporal string
	root     string
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins.root = root
	dir, err := os.MkdirTemp("", "turnstile-bins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins.dir = dir
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/envserver", "./cmd/policyserver", "./cmd/worker", "./cmd/starter", "./cmd/devserver", "./cmd/gateway")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)
		return 1
	}
	bins.temporal = os.Getenv("TURNSTILE_TEMPORAL_BIN")
	if bins.temporal == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		bins.temporal, err = devenv.EnsureCLI(ctx, root)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "the Temporal CLI is needed for integration tests:", err)
			return 1
		}
	}
	return m.Run()
}

// proc is a process a test started; it is killed by PID at cleanup. The
// lower-case fields and methods keep the tests' spelling of stack.Proc.
type proc struct {
	*stack.Proc
	name string
	cmd  *exec.Cmd
	done <-chan struct{}
}

func (p *proc) tail(n int) string { return p.Tail(n) }

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() { p.Kill() }

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) { return p.Exited() }

// cluster is one set of real processes.
type cluster struct {
	t        testing.TB
	dir      string
	launch   *stack.Launcher
	mu       sync.Mutex
	procs    []*proc
	hostPort string
	client   client.Client
	envURL   string
	modelURL string
	token    string // the environment servers' control token
	// dataToken is the environment servers' data token: workers send it,
	// and so must every client a test makes (dataClient).
	dataToken string
	store     string
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), token: "test-control-token", dataToken: "test-data-plane-token"}
	c.launch = &stack.Launcher{Dir: c.dir}
	c.store = filepath.Join(c.dir, "transcripts")
	t.Cleanup(func() {
		if c.client != nil {
			c.client.Close()
		}
		c.mu.Lock()
		procs := append([]*proc(nil), c.procs...)
		c.mu.Unlock()
		for _, p := range procs {
			p.kill()
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("---- %s log tail ----\n%s", p.name, p.tail(40))
			}
		}
	})
	return c
}

// newStack is a cluster running the whole stack most tests need: the
// Temporal dev server, an environment server, the scripted policy server
// (with policyArgs, e.g. "--latency", "200ms") and a worker.
func newStack(t *testing.T, policyArgs ...string) *cluster {
	t.Helper()
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer(policyArgs...)
	c.startWorker()
	return c
}

func (c *cluster) start(name, bin string, args []string, env ...string) *proc {
	c.t.Helper()
	sp, err := c.launch.Start(name, bin, args, env...)
	require.NoError(c.t, err)
	return c.track(sp)
}

// track keeps a started process for cleanup and killProc.
func (c *cluster) track(sp *stack.Proc) *proc {
	p := &proc{Proc: sp, name: sp.Name, cmd: sp.Cmd, done: sp.Done()}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// waitFor polls cond until it holds, the process dies, or the timeout.
func (c *cluster) waitFor(what string, p *proc, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	var sp *stack.Proc
	if p != nil {
		sp = p.Proc
	}
	require.NoError(c.t, stack.WaitFor(context.Background(), what, sp, timeout, cond))
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := stack.FreePort()
	require.NoError(t, err)
	return port
}

// startTemporal starts an in-memory dev server with the settings of
// temporal-dev.yaml on free ports, and connects a client.
func (c *cluster) startTemporal() *proc {
	c.t.Helper()
	return c.startTemporalWith(0, "")
}

// startTemporalWith starts the dev server on port (0: a free one), keeping
// its state in the database file db ("" for in-memory): a test about
// Temporal's own crash restarts it on the same port and file.
func (c *cluster) startTemporalWith(port int, db string) *proc {
	c.t.Helper()
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
	sp, hostPort, cl, err := c.launch.StartTemporal(context.Background(),
		stack.Temporal{CLI: bins.temporal, DevConfig: filepath.Join(bins.root, "temporal-dev.yaml"), Port: port, DB: db}, 90*time.Second)
	var p *proc
	if sp != nil {
		p = c.track(sp)
	}
	require.NoError(c.t, err)
	c.hostPort, c.client = hostPort, cl
	return p
}

// startEnvServer starts an environment server on a free port; its address is
// kept across restarts so rollouts find it again.
func (c *cluster) startEnvServer(extraEnv ...string) *proc {
	c.t.Helper()
	return c.startEnvProcess("envserver", filepath.Join(bins.dir, "envserver"), nil, extraEnv...)
}

// startEnvProcess starts a participant (bin with args before the common
// flags) as env-0 on the environment server's address (a free port the
// first time, the same one after a restart), with the tokens, and waits for
// its ready file and health.
func (c *cluster) startEnvProcess(name, bin string, args []string, extraEnv ...string) *proc {
	c.t.Helper()
	listen := "127.0.0.1:0"
	if c.envURL != "" {
		listen = strings.TrimPrefix(c.envURL, "http://")
	}
	sp, url, err := c.launch.StartServer(context.Background(), name, bin,
		append(args, "--listen", listen, "--control-token", c.token, "--name", "env-0"),
		append([]string{protocol.DataTokenEnvVar + "=" + c.dataToken}, extraEnv...), stack.EnvHealth, 30*time.Second)
	return c.started(sp, err, func() { c.envURL = url })
}

// started tracks a server StartServer started and, once it is ready, notes
// its address; a server that never got ready fails the test.
func (c *cluster) started(sp *stack.Proc, err error, ready func()) *proc {
	c.t.Helper()
	var p *proc
	if sp != nil {
		p = c.track(sp)
	}
	require.NoError(c.t, err)
	ready()
	return p
}

func (c *cluster) startPolicyServer(args ...string) *proc {
	c.t.Helper()
	listen := "127.0.0.1:0"
	if c.modelURL != "" {
		// A restarted policy server keeps its address: workers know it.
		listen = strings.TrimSuffix(strings.TrimPrefix(c.modelURL, "http://"), "/v1")
	}
	sp, url, err := c.launch.StartServer(context.Background(), "policyserver", filepath.Join(bins.dir, "policyserver"),
		append([]string{"--listen", listen}, args...), nil, stack.PolicyHealth, 30*time.Second)
	return c.started(sp, err, func() { c.modelURL = url })
}

// startWorker starts a worker process; extra environment entries arm
// failpoints.
func (c *cluster) startWorker(extraEnv ...string) *proc {
	c.t.Helper()
	env := append(stack.WorkerEnv{
		HostPort: c.hostPort, EnvURL: c.envURL, ModelURL: c.modelURL, Store: c.store,
		ControlToken: c.token, DataToken: c.dataToken, AllowLoopback: true,
	}.Environ(), extraEnv...)
	p := c.start("worker", filepath.Join(bins.dir, "worker"), nil, env...)
	c.waitFor("worker polling", p, 60*time.Second, func() bool { return c.hasPoller() })
	return p
}

func (c *cluster) hasPoller() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.client.DescribeTaskQueue(ctx, rollout.TaskQueue, enums.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && len(resp.GetPollers()) > 0
}

func healthy(url string) bool { return stack.Healthy(url) }

// rolloutSpec builds the input of rollout i of a set: the task and seed
// depend only on i, so two sets with the same specs are comparable.
func counterInput(set string, i int, target int) rollout.Input {
	return rollout.Input{
		RolloutID: fmt.Sprintf("%s-%04d", set, i),
		Set:       set,
		Task:      json.RawMessage(fmt.Sprintf(`{"target":%d}`, target)),
		Env:       rollout.EnvRef{Name: "counter"},
		Policy:    rollout.PolicyRef{Model: "scripted-counter"},
		Seed:      int64(1000 + i),
		Limits:    rollout.Limits{MaxTurns: 24},
	}
}

func (c *cluster) submit(ctx context.Context, in rollout.Input) client.WorkflowRun {
	c.t.Helper()
	run, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       rollout.WorkflowID(in.RolloutID),
		TaskQueue:                rollout.TaskQueue,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutID).ValueSet(in.RolloutID),
			temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutSet).ValueSet(in.Set),
			temporal.NewSearchAttributeKeyInt64(rollout.SARolloutAttempt).ValueSet(int64(in.Attempt)),
		),
	}, rollout.WorkflowName, in)
	require.NoError(c.t, err, "start %s", in.RolloutID)
	return run
}

// results waits for every run and returns the results by rollout id.
func (c *cluster) results(ctx context.Context, runs []client.WorkflowRun) map[string]rollout.Result {
	c.t.Helper()
	out := map[string]rollout.Result{}
	for _, run := range runs {
		var res rollout.Result
		require.NoError(c.t, run.Get(ctx, &res), "rollout %s", run.GetID())
		out[res.RolloutID] = res
	}
	return out
}

// dataClient is a data-plane client of the environment server at url, with
// the cluster's data token.
func (c *cluster) dataClient(url string) *protocol.Client {
	return protocol.NewDataClient(url, c.dataToken, nil)
}

func (c *cluster) envStats(ctx context.Context) protocol.Stats {
	c.t.Helper()
	st, err := c.dataClient(c.envURL).Stats(ctx)
	require.NoError(c.t, err)
	return st
}

// history returns the raw events of a workflow run.
func (c *cluster) historySizes(ctx context.Context, workflowID, runID string) ([]int, []enums.EventType, [][]byte) {
	c.t.Helper()
	iter := c.client.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var sizes []int
	var types []enums.EventType
	var inputs [][]byte
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(c.t, err)
		sizes = append(sizes, protoSize(ev))
		types = append(types, ev.GetEventType())
		var in []byte
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == rollout.CallModelName {
			if p := a.GetInput().GetPayloads(); len(p) > 0 {
				in = p[0].GetData()
			}
		}
		inputs = append(inputs, in)
	}
	return sizes, types, inputs
}

// quietLogger drops the SDK's client logs in readiness probes.
type quietLogger = stack.Quiet

// temporalCLI runs the official CLI against the test server.
func (c *cluster) temporalCLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bins.temporal, append(args, "--address", c.hostPort, "--namespace", "default")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
