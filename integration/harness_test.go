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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/devenv"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/rollout"
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

// proc is a process a test started; it is killed by PID at cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (p *proc) tail(n int) string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// cluster is one set of real processes.
type cluster struct {
	t        testing.TB
	dir      string
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
	c := &cluster{t: t, dir: t.TempDir(), token: "test-control-token", dataToken: "test-data-token"}
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
	logPath := filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// waitFor polls cond until it holds, the process dies, or the timeout.
func (c *cluster) waitFor(what string, p *proc, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil {
			if done, err := p.exited(); done {
				c.t.Fatalf("%s: %s exited (%v) before it was ready:\n%s", what, p.name, err, p.tail(30))
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not ready after %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond) // polling interval of a readiness probe, not a wait for an event
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startTemporal starts an in-memory dev server with the settings of
// temporal-dev.yaml on free ports, and connects a client.
func (c *cluster) startTemporal() *proc {
	c.t.Helper()
	return c.startTemporalWith(freePort(c.t), "")
}

// startTemporalWith starts the dev server on port, keeping its state in the
// database file db ("" for in-memory): a test about Temporal's own crash
// restarts it on the same port and file, so workers reconnect to it.
func (c *cluster) startTemporalWith(port int, db string) *proc {
	c.t.Helper()
	cfg, err := devenv.Load(filepath.Join(bins.root, "temporal-dev.yaml"))
	if err != nil {
		c.t.Fatal(err)
	}
	headless := true
	args, err := cfg.StartDevArgs("dev", devenv.Overrides{Port: port, DBFilename: db, Headless: &headless, LogLevel: "error"})
	if err != nil {
		c.t.Fatal(err)
	}
	p := c.start("temporal", bins.temporal, args)
	c.hostPort = fmt.Sprintf("127.0.0.1:%d", port)
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
	c.waitFor("temporal dev server", p, 90*time.Second, func() bool {
		cl, err := client.Dial(client.Options{HostPort: c.hostPort, Logger: quietLogger{}})
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := cl.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			cl.Close()
			return false
		}
		c.client = cl
		return true
	})
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
	ready := filepath.Join(c.dir, fmt.Sprintf("%s-ready-%d", name, time.Now().UnixNano()))
	p := c.start(name, bin,
		append(args, "--listen", listen, "--ready-file", ready, "--control-token", c.token, "--name", "env-0"),
		append([]string{protocol.DataTokenEnvVar + "=" + c.dataToken}, extraEnv...)...)
	c.waitFor(name, p, 30*time.Second, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		c.envURL = strings.TrimSpace(string(data))
		return healthy(c.envURL + "/healthz")
	})
	return p
}

func (c *cluster) startPolicyServer(args ...string) *proc {
	c.t.Helper()
	listen := "127.0.0.1:0"
	if c.modelURL != "" {
		// A restarted policy server keeps its address: workers know it.
		listen = strings.TrimSuffix(strings.TrimPrefix(c.modelURL, "http://"), "/v1")
	}
	ready := filepath.Join(c.dir, fmt.Sprintf("policy-ready-%d", time.Now().UnixNano()))
	p := c.start("policyserver", filepath.Join(bins.dir, "policyserver"),
		append([]string{"--listen", listen, "--ready-file", ready}, args...))
	c.waitFor("policy server", p, 30*time.Second, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		c.modelURL = strings.TrimSpace(string(data))
		return healthy(strings.TrimSuffix(c.modelURL, "/v1") + "/healthz")
	})
	return p
}

// startWorker starts a worker process; extra environment entries arm
// failpoints.
func (c *cluster) startWorker(extraEnv ...string) *proc {
	c.t.Helper()
	env := append([]string{
		"TEMPORAL_ADDRESS=" + c.hostPort,
		"TEMPORAL_NAMESPACE=default",
		"TURNSTILE_ENV_URL=" + c.envURL,
		"TURNSTILE_MODEL_BASE_URL=" + c.modelURL,
		"TURNSTILE_TRANSCRIPT_DIR=" + c.store,
		"TURNSTILE_CONTROL_TOKEN=" + c.token,
		protocol.DataTokenEnvVar + "=" + c.dataToken,
		"TURNSTILE_LOG_LEVEL=warn",
	}, extraEnv...)
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

func healthy(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

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
	if err != nil {
		c.t.Fatalf("start %s: %v", in.RolloutID, err)
	}
	return run
}

// results waits for every run and returns the results by rollout id.
func (c *cluster) results(ctx context.Context, runs []client.WorkflowRun) map[string]rollout.Result {
	c.t.Helper()
	out := map[string]rollout.Result{}
	for _, run := range runs {
		var res rollout.Result
		if err := run.Get(ctx, &res); err != nil {
			c.t.Fatalf("rollout %s: %v", run.GetID(), err)
		}
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
	if err != nil {
		c.t.Fatal(err)
	}
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
		if err != nil {
			c.t.Fatal(err)
		}
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
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// temporalCLI runs the official CLI against the test server.
func (c *cluster) temporalCLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bins.temporal, append(args, "--address", c.hostPort, "--namespace", "default")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
