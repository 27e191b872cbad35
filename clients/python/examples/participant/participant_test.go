// Package pythonparticipant_test checks the Python participant beside it, on
// the participant library of the turnstile client (turnstile.participant)
// installed into a fresh virtual environment, from the Go side: its unit
// tests, the library's checkpoint files against the Go artifact package byte
// for byte, and its protocol through the Go clients and the scripted
// policies of its environments. Only python3 (standard library) is needed.
package pythonparticipant_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pyclient "github.com/turnstile-rl/turnstile/clients/python"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/notes"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// The participants these tests start take their tokens from the
// environment, as a deployment would.
const (
	controlToken = "py-control-token"
	dataToken    = "py-data-token"
)

// venv is the virtual environment with the turnstile client (and so the
// participant library) installed, made once for the whole package.
var venv struct {
	once sync.Once
	dir  string
	py   string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if venv.dir != "" {
		_ = os.RemoveAll(venv.dir)
	}
	os.Exit(code)
}

// python is the interpreter of a fresh virtual environment with the client
// installed from clients/python (offline, as the docs install it): the
// example runs on the installed library, not on its sources.
func python(t *testing.T) string {
	t.Helper()
	venv.once.Do(func() {
		py3, err := exec.LookPath("python3")
		if err != nil {
			venv.err = fmt.Errorf("the Python participant needs python3 (standard library only): %w", err)
			return
		}
		if venv.dir, venv.err = os.MkdirTemp("", "pyparticipant-venv-"); venv.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		v, err := pyclient.Install(ctx, py3, filepath.Join("..", ".."), filepath.Join(venv.dir, "venv"))
		if err != nil {
			venv.err = fmt.Errorf("installing the turnstile client into a venv: %w", err)
			return
		}
		venv.py = v.Python
	})
	require.NoError(t, venv.err)
	return venv.py
}

// TestPythonUnitTests runs the unittest suite of the example's environments.
func TestPythonUnitTests(t *testing.T) {
	cmd := exec.Command(python(t), "-m", "unittest", "-q")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest:\n%s", out)
}

// TestArtifactBytesMatchGo: the same sections give the same files from the
// library's artifact module as from the Go artifact package, and each side validates the
// other's checkpoint.
func TestArtifactBytesMatchGo(t *testing.T) {
	big := strings.Repeat("x", 700) // spans two tar blocks
	sections := []artifact.Section{
		{Name: "sessions", Records: []artifact.Record{{Key: "b<&>é", Data: []byte(`{"x":1}`)}, {Key: "a", Data: []byte(big)}}},
		{Name: "fences", Records: []artifact.Record{}},
		{Name: "server", Records: []artifact.Record{{Key: "server", Data: []byte("{}")}}},
	}
	for i := range 600 { // more than one shard (512 records each)
		sections[1].Records = append(sections[1].Records, artifact.Record{Key: fmt.Sprintf("r%04d", i), Data: []byte(fmt.Sprint(i))})
	}
	meta := artifact.Meta{CheckpointID: "cp<1>", Labels: map[string]string{"name": "py", "component": "environment_server"}}
	dir := t.TempDir()
	goDir, pyDir := filepath.Join(dir, "go"), filepath.Join(dir, "py")
	m, err := artifact.Write(context.Background(), goDir, meta, sections, artifact.Options{})
	require.NoError(t, err)

	type rec struct {
		Key  string `json:"key"`
		Data string `json:"data"`
	}
	type sec struct {
		Name    string `json:"name"`
		Records []rec  `json:"records"`
	}
	doc := struct {
		Labels   map[string]string `json:"labels"`
		Sections []sec             `json:"sections"`
	}{Labels: meta.Labels}
	for _, s := range sections {
		ps := sec{Name: s.Name, Records: []rec{}}
		for _, r := range s.Records {
			ps.Records = append(ps.Records, rec{Key: r.Key, Data: string(r.Data)})
		}
		doc.Sections = append(doc.Sections, ps)
	}
	in, err := json.Marshal(doc)
	require.NoError(t, err)
	cmd := exec.Command(python(t), "-m", "turnstile.participant", "artifact", "write", pyDir, meta.CheckpointID)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, m.Digest, strings.TrimSpace(string(out)), "manifest digest")

	goFiles, err := os.ReadDir(goDir)
	require.NoError(t, err)
	pyFiles, err := os.ReadDir(pyDir)
	require.NoError(t, err)
	require.Len(t, pyFiles, len(goFiles))
	for _, f := range goFiles {
		want, err := os.ReadFile(filepath.Join(goDir, f.Name()))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(pyDir, f.Name()))
		require.NoError(t, err, "Python wrote no %s", f.Name())
		require.Equal(t, want, got, "%s differs", f.Name())
	}
	_, err = artifact.Open(context.Background(), pyDir, meta.CheckpointID)
	require.NoError(t, err, "Go validates the Python checkpoint")
	out, err = exec.Command(python(t), "-m", "turnstile.participant", "artifact", "check", goDir, meta.CheckpointID).CombinedOutput()
	require.NoError(t, err, "Python validates the Go checkpoint: %s", out)
}

// participant is a running Python participant process.
type participant struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startParticipant starts participant.py on a free port and waits for its
// ready file and health endpoint.
func startParticipant(t *testing.T, name string, extra ...string) *participant {
	t.Helper()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := &participant{log: filepath.Join(dir, "participant.log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	require.NoError(t, err)
	args := append([]string{"participant.py", "--listen", "127.0.0.1:0", "--ready-file", ready, "--name", name}, extra...)
	p.cmd = exec.Command(python(t), args...)
	p.cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		protocol.ControlTokenEnvVar+"="+controlToken, protocol.DataTokenEnvVar+"="+dataToken)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("participant %s log:\n%s", name, b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			p.url = strings.TrimSpace(string(b))
			break
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log)
			require.Failf(t, "participant exited before it was ready", "its log:\n%s", b)
		default:
		}
		require.False(t, time.Now().After(deadline), "participant not ready after 30s")
		time.Sleep(20 * time.Millisecond) // polling a readiness file, not waiting for an event
	}
	return p
}

// kill ends the process with SIGKILL, by PID, and waits for it.
func (p *participant) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// episode drives one rollout of a catalog environment with its scripted
// policy, as the Rollout workflow would: the conversation grows with each
// observation.
type episode struct {
	entry    envs.Entry
	rollout  string
	attempt  int
	seed     int64
	msgs     []envs.Message
	revision int64
	turn     int
	answers  []string // every observation, in order
}

func (e *episode) start(ctx context.Context, t *testing.T, c *protocol.Client, task json.RawMessage) {
	t.Helper()
	resp, err := c.Start(ctx, protocol.StartRequest{Identity: protocol.Identity{RolloutID: e.rollout, Attempt: e.attempt,
		RequestID: protocol.SeedRequestID(e.rollout)}, Env: e.entry.Name, Seed: e.seed, Task: task})
	require.NoError(t, err)
	require.Equal(t, envs.ModeExportRestore, resp.Spec.Mode)
	e.msgs = []envs.Message{{Role: "system", Content: resp.Start.Instructions}, {Role: "user", Content: resp.Start.Observation}}
}

// step asks the policy for the next message and applies its tool call; it
// reports false once the policy answered done.
func (e *episode) step(ctx context.Context, t *testing.T, c *protocol.Client, imperfection float64) bool {
	t.Helper()
	r, err := e.entry.Policy.Respond(envs.PolicyRequest{Messages: e.msgs, Seed: e.seed, Imperfection: imperfection})
	require.NoError(t, err)
	if len(r.ToolCalls) == 0 {
		return false
	}
	call := r.ToolCalls[0]
	resp, err := c.Operate(ctx, protocol.OperateRequest{Identity: protocol.Identity{RolloutID: e.rollout, Attempt: e.attempt,
		RequestID: protocol.OperateRequestID(e.rollout, e.turn, 0)}, ExpectedRevision: e.revision, Tool: call.Name,
		Arguments: json.RawMessage(call.Arguments)})
	require.NoError(t, err, "%s turn %d: %s %s", e.rollout, e.turn, call.Name, call.Arguments)
	e.revision = resp.Revision
	e.turn++
	e.answers = append(e.answers, resp.Outcome.Observation)
	e.msgs = append(e.msgs, envs.Message{Role: "assistant", ToolCalls: r.ToolCalls},
		envs.Message{Role: "tool", ToolCallID: call.ID, Content: resp.Outcome.Observation})
	return true
}

func (e *episode) verify(ctx context.Context, t *testing.T, c *protocol.Client) float64 {
	t.Helper()
	v, err := c.Verify(ctx, protocol.VerifyRequest{Identity: protocol.Identity{RolloutID: e.rollout, Attempt: e.attempt,
		RequestID: protocol.VerifyRequestID(e.rollout)}, ExpectedRevision: e.revision})
	require.NoError(t, err)
	return v.Verdict.Reward
}

// TestScriptedPolicyFinishesWithinTheDefaultLimit plays generated notes
// tasks with the scripted policy against the participant: a perfect policy
// passes within the catalog's turn limit, an imperfect one finishes in it.
func TestScriptedPolicyFinishesWithinTheDefaultLimit(t *testing.T) {
	p := startParticipant(t, "py-limits")
	c := protocol.NewDataClient(p.url, dataToken, nil)
	entry, err := catalog.Find(notes.Name)
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 24 {
		for _, imperfection := range []float64{0, 0.5} {
			task, err := entry.Task(7, i)
			require.NoError(t, err)
			e := &episode{entry: entry, rollout: fmt.Sprintf("lim-%d-%v", i, imperfection), seed: int64(7000 + i)}
			e.start(ctx, t, c, task)
			turns := 1
			for e.step(ctx, t, c, imperfection) {
				turns++
			}
			require.LessOrEqual(t, turns, entry.MaxTurns, "task %d %s", i, task)
			if reward := e.verify(ctx, t, c); imperfection == 0 {
				require.True(t, entry.Passed(reward), "task %d %s: perfect policy scored %v", i, task, reward)
			}
		}
	}
}

// TestCheckpointKillRestoreThroughGoClients: for each export_restore
// environment of the example, rollouts are cut mid-episode through the Go
// control client, the checkpoint validates with the Go artifact package,
// the participant is SIGKILLed, a fresh one restores the cut as attempt 1,
// and every rollout continues with the same observations and reward as an
// uninterrupted run; attempt 0 is refused from then on.
func TestCheckpointKillRestoreThroughGoClients(t *testing.T) {
	for _, tc := range []struct {
		env  string
		tool string // an operation attempt 0 tries after the restore
		args string
	}{
		{env: notes.Name, tool: notes.ToolList, args: `{}`},
		{env: counter.Name, tool: counter.ToolIncrement, args: `{"amount":1}`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			entry, err := catalog.Find(tc.env)
			require.NoError(t, err)
			checkpointKillRestore(t, entry, tc.tool, json.RawMessage(tc.args))
		})
	}
}

func checkpointKillRestore(t *testing.T, entry envs.Entry, staleTool string, staleArgs json.RawMessage) {
	ctx := context.Background()
	const n = 4
	tasks := make([]json.RawMessage, n)
	for i := range tasks {
		var err error
		tasks[i], err = entry.Task(3, i)
		require.NoError(t, err)
	}
	run := func(c *protocol.Client, prefix string) []*episode {
		eps := make([]*episode, n)
		for i := range eps {
			eps[i] = &episode{entry: entry, rollout: fmt.Sprintf("%s-%d", prefix, i), seed: int64(i)}
			eps[i].start(ctx, t, c, tasks[i])
		}
		return eps
	}
	finish := func(c *protocol.Client, eps []*episode) []string {
		var out []string
		for _, e := range eps {
			for e.step(ctx, t, c, 0.3) {
			}
			out = append(out, fmt.Sprintf("%q %d %v", e.answers, e.revision, e.verify(ctx, t, c)))
		}
		return out
	}
	base := startParticipant(t, "py-base")
	want := finish(protocol.NewDataClient(base.url, dataToken, nil), run(protocol.NewDataClient(base.url, dataToken, nil), "r"))

	first := startParticipant(t, "py-0")
	c := protocol.NewDataClient(first.url, dataToken, nil)
	eps := run(c, "r")
	for i, e := range eps {
		for range i { // rollout i is cut after i operations
			require.True(t, e.step(ctx, t, c, 0.3))
		}
	}
	cc := protocol.NewControlClient(first.url, controlToken, nil)
	prep, err := cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k1", Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Len(t, prep.Sessions, n)
	loc := filepath.Join(t.TempDir(), "k1")
	commit, err := cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k1", Location: loc})
	require.NoError(t, err)
	cp, err := artifact.Open(ctx, loc, "k1")
	require.NoError(t, err, "the coordinator validates what the participant committed")
	require.Equal(t, commit.ManifestDigest, cp.Manifest().Digest)
	first.kill()

	second := startParticipant(t, "py-0")
	cc = protocol.NewControlClient(second.url, controlToken, nil)
	attempts := map[string]int{}
	for _, e := range eps {
		attempts[e.rollout] = 1
	}
	restored, err := cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k1", Location: loc, Attempts: attempts})
	require.NoError(t, err)
	require.Len(t, restored.Restored, n)
	_, err = cc.Resume(ctx, "k1")
	require.NoError(t, err)
	c = protocol.NewDataClient(second.url, dataToken, nil)
	for _, e := range eps {
		_, err := c.Operate(ctx, protocol.OperateRequest{Identity: protocol.Identity{RolloutID: e.rollout, Attempt: 0, RequestID: e.rollout + "/stale"},
			ExpectedRevision: e.revision, Tool: staleTool, Arguments: staleArgs})
		var re *protocol.RemoteError
		require.ErrorAs(t, err, &re)
		require.Equal(t, protocol.CodeStaleAttempt, re.Code)
		e.attempt = 1
	}
	require.Equal(t, want, finish(c, eps), "the restored rollouts end as the uninterrupted ones")
}
