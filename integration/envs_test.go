package integration_test

// Checkpoint equivalence per environment, on real environment-server
// processes and without Temporal: an episode is driven directly over HTTP by
// the environment's scripted policy (called in-process on the conversation
// built from the observations, as the agent loop builds it). Run A goes
// uninterrupted; run B is cut after k mutations, checkpointed, the server
// SIGKILLed and replaced, the checkpoint restored as attempt 1, and the
// episode continued. B's observations and final reward must equal A's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Settings of the equivalence runs.
const (
	// equivImperfection makes the scripted policies err on some seeds, so
	// the compared rewards are not all equal.
	equivImperfection = 0.3
	// equivMaxTurns bounds an episode; every scripted episode ends far
	// sooner.
	equivMaxTurns = 64
	// equivTimeout bounds one environment's whole table row.
	equivTimeout = 90 * time.Second
)

// envCase is one row of the table: an environment, its policy and the seeds
// its episodes are drawn with.
type envCase struct {
	env    string
	mode   envs.Mode
	policy envs.Policy
	seeds  []int64
}

var envCases = []envCase{
	// Seeds are picked so each row has episodes of several lengths and, where
	// the policy can err, one that ends with reward 0 (counter 8, workplace
	// 14, sandbox 1).
	{env: "counter", mode: envs.ModeExportRestore, policy: counter.Policy{}, seeds: []int64{1, 3, 8}},
	{env: "blackjack", mode: envs.ModeExportRestore, policy: blackjack.Policy{}, seeds: []int64{1, 2, 3, 4}},
	{env: "workplace", mode: envs.ModeExportRestore, policy: workplace.Policy{}, seeds: []int64{2, 6, 14}},
	{env: "sandbox", mode: envs.ModeReplay, policy: sandbox.Policy{}, seeds: []int64{1, 2}},
	{env: "arithmetic", mode: envs.ModeStateless, policy: arithmetic.Policy{}, seeds: []int64{1, 2}},
}

// TestEnvCheckpointEquivalence is the reference's equivalence check, per
// environment: checkpoint after k mutations, replace the process, restore,
// and the rest of the episode equals an uninterrupted run.
func TestEnvCheckpointEquivalence(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	for _, ec := range envCases {
		t.Run(ec.env, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), equivTimeout)
			defer cancel()
			passed, total := 0, 0
			for _, seed := range ec.seeds {
				t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
					p, n := runEquivalenceSeed(ctx, t, ec, seed)
					passed += p
					total += n
				})
			}
			t.Logf("%s (%s): %d of %d checkpoint cuts passed", ec.env, ec.mode, passed, total)
		})
	}
}

// runEquivalenceSeed runs A once, then one B per cut point, all on one
// cluster whose server is replaced at every cut. It returns how many cuts
// passed of how many were tried.
func runEquivalenceSeed(ctx context.Context, t *testing.T, ec envCase, seed int64) (passed, total int) {
	c := newCluster(t)
	srv := startEnvProc(t, c)

	caps, err := srv.ctl.Capabilities(ctx)
	require.NoError(t, err)
	i := slices.IndexFunc(caps.Envs, func(e protocol.EnvCapability) bool { return e.Name == ec.env })
	require.GreaterOrEqual(t, i, 0, "capabilities list %s", ec.env)
	require.Equal(t, ec.mode, caps.Envs[i].Mode, "declared mode of %s", ec.env)

	task, err := catalog.Task(ec.env, seed, 0)
	require.NoError(t, err)

	a := newEpisodeDriver(ec, fmt.Sprintf("%s-s%d-a", ec.env, seed), seed, task)
	a.start(ctx, t, srv)
	for !a.done {
		a.next(ctx, t, srv)
	}
	a.verify(ctx, t, srv)
	want := a.ep
	n := len(want.Steps)
	t.Logf("run A: %d mutations, verdict reward %v, dense reward %v", n, want.Verdict.Reward, want.DenseReward)

	for _, k := range cutPoints(n) {
		total++
		t.Run(fmt.Sprintf("cut%d", k), func(t *testing.T) {
			if ec.mode != envs.ModeRestartOnly { // stateless sessions are cut with their state, replay ones with their calls
				srv = runExportRestoreCut(ctx, t, c, srv, ec, seed, task, k, want)
			} else {
				srv = runRestartCut(ctx, t, c, srv, ec, seed, task, k, want)
			}
			passed++
		})
		if passed != total {
			break // the server may be in any state; the later cuts would only repeat the failure
		}
	}
	return passed, total
}

// cutPoints are the numbers of mutations after which run B is cut: right
// after the start, after the first, in the middle, and after the last (the
// next operation is then the verify).
func cutPoints(n int) []int {
	var out []int
	for _, k := range []int{0, 1, n / 2, n} {
		if k <= n && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// runExportRestoreCut is run B of an export_restore environment cut after k
// mutations. It returns the server process that is running at the end.
func runExportRestoreCut(ctx context.Context, t *testing.T, c *cluster, srv *envProc, ec envCase, seed int64,
	task json.RawMessage, k int, want episode) *envProc {
	b := newEpisodeDriver(ec, fmt.Sprintf("%s-s%d-b%d", ec.env, seed, k), seed, task)
	b.start(ctx, t, srv)
	for range k {
		require.False(t, b.done, "run B ended before %d mutations", k)
		b.next(ctx, t, srv)
	}

	loc, ckpt := takeServerCheckpoint(ctx, t, c, srv, b)
	srv = srv.replace(t)
	res, err := srv.ctl.Restore(ctx, protocol.RestoreRequest{
		CheckpointID: ckpt, Location: loc, Attempts: map[string]int{b.rollout: 1},
	})
	require.NoError(t, err, "restore")
	got := summaryOf(res.Restored, b.rollout)
	require.NotNil(t, got, "restore installs %s's session: %+v", b.rollout, res)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, b.revision, got.Revision)
	require.Nil(t, summaryOf(res.Restarted, b.rollout), "an export_restore session is not restarted")
	if ec.mode == envs.ModeReplay {
		st := stats(ctx, t, srv)
		require.Equal(t, int64(k+1), st.Reapplied, "the replay re-applied the start and the %d mutations before the cut", k)
		require.Zero(t, st.Applied, "a replay applies nothing")
	}
	expectParked(ctx, t, srv, b)
	_, err = srv.ctl.Resume(ctx, ckpt)
	require.NoError(t, err, "resume")

	info, err := srv.data.Session(ctx, b.rollout)
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: b.rollout, Env: ec.env, Attempt: 1, Revision: b.revision}, info)

	// Fencing: attempt 0 is refused, whether it sends something new or
	// re-sends what it already did, and nothing it sends is applied.
	before := stats(ctx, t, srv)
	expectCode(t, http.StatusConflict, protocol.CodeStaleAttempt, b.newOperate(ctx, srv, 0))
	expectCode(t, http.StatusConflict, protocol.CodeStaleAttempt, b.resendLast(ctx, t, srv, 0))
	after := stats(ctx, t, srv)
	require.Equal(t, before.Applied, after.Applied, "a stale attempt applies nothing")
	require.Equal(t, before.Replayed, after.Replayed, "a stale attempt gets no replay")

	// At most once: attempt 1 re-sending the last mutation applied before
	// the cut gets the stored response, not a second application.
	require.NoError(t, b.resendLast(ctx, t, srv, 1), "replay of the last mutation before the cut")
	after2 := stats(ctx, t, srv)
	require.Equal(t, after.Applied, after2.Applied, "a replay applies nothing")
	require.Equal(t, after.Replayed+1, after2.Replayed, "the replay is counted")
	info, err = srv.data.Session(ctx, b.rollout)
	require.NoError(t, err)
	require.Equal(t, b.revision, info.Revision, "the replay left the revision as it was")

	// Continue as attempt 1 to the end.
	b.attempt = 1
	for !b.done {
		b.next(ctx, t, srv)
	}
	b.verify(ctx, t, srv)
	require.Equal(t, want.Steps[k:], b.ep.Steps[k:], "observations after the cut")
	require.Equal(t, want, b.ep, "the whole episode")
	end := stats(ctx, t, srv)
	require.Equal(t, int64(len(want.Steps)-k+1), end.Applied-after2.Applied,
		"after the restore exactly the remaining mutations and the verify are applied")
	return srv
}

// runRestartCut is run B of an environment whose state is not exported
// (restart_only) cut after k mutations: the restore raises only the fence,
// and the rollout starts over as attempt 1. A stateless environment (arithmetic) is cut
// with its state like an export_restore one (the coordinator continues such
// rollouts at their boundary), so it runs through runExportRestoreCut.
func runRestartCut(ctx context.Context, t *testing.T, c *cluster, srv *envProc, ec envCase, seed int64,
	task json.RawMessage, k int, want episode) *envProc {
	rollout := fmt.Sprintf("%s-s%d-b%d", ec.env, seed, k)
	b := newEpisodeDriver(ec, rollout, seed, task)
	b.start(ctx, t, srv)
	for range k {
		require.False(t, b.done, "run B ended before %d mutations", k)
		b.next(ctx, t, srv)
	}

	loc, ckpt := takeServerCheckpoint(ctx, t, c, srv, b)
	srv = srv.replace(t)
	res, err := srv.ctl.Restore(ctx, protocol.RestoreRequest{
		CheckpointID: ckpt, Location: loc, Attempts: map[string]int{rollout: 1},
	})
	require.NoError(t, err, "restore")
	got := summaryOf(res.Restarted, rollout)
	require.NotNil(t, got, "restore lists %s as restarted: %+v", rollout, res)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, ec.mode, got.Mode)
	require.Nil(t, summaryOf(res.Restored, rollout), "a %s session is not installed", ec.mode)
	expectParked(ctx, t, srv, b)
	_, err = srv.ctl.Resume(ctx, ckpt)
	require.NoError(t, err, "resume")

	// Nothing of the old episode is installed; only the fence is.
	_, err = srv.data.Session(ctx, rollout)
	expectCode(t, http.StatusNotFound, protocol.CodeUnknownSession, err)
	before := stats(ctx, t, srv)
	expectCode(t, http.StatusConflict, protocol.CodeStaleAttempt, b.newOperate(ctx, srv, 0))
	expectCode(t, http.StatusConflict, protocol.CodeStaleAttempt, b.resendLast(ctx, t, srv, 0))
	// Attempt 1 has no session to operate on until it starts over (a re-sent
	// start would be that start-over, so only operations are tried here).
	expectCode(t, http.StatusNotFound, protocol.CodeUnknownSession, b.newOperate(ctx, srv, 1))
	if b.last != nil {
		expectCode(t, http.StatusNotFound, protocol.CodeUnknownSession, b.resendLast(ctx, t, srv, 1))
	}
	after := stats(ctx, t, srv)
	require.Equal(t, before.Applied, after.Applied, "refused requests apply nothing")
	require.Equal(t, before.Replayed, after.Replayed, "no receipts were restored")

	// The start-over: a start from attempt 1 begins a fresh episode that
	// ends as the uninterrupted one did.
	fresh := newEpisodeDriver(ec, rollout, seed, task)
	fresh.attempt = 1
	fresh.start(ctx, t, srv)
	require.False(t, fresh.startReplayed, "the start-over is a fresh episode, not a replay")
	for !fresh.done {
		fresh.next(ctx, t, srv)
	}
	fresh.verify(ctx, t, srv)
	require.Equal(t, want.Verdict, fresh.ep.Verdict, "final reward of the start-over")
	require.Equal(t, want, fresh.ep, "the whole start-over episode")
	end := stats(ctx, t, srv)
	require.Equal(t, int64(len(want.Steps)+2), end.Applied-after.Applied,
		"the start-over applies its start, its mutations and its verify")
	return srv
}

// takeServerCheckpoint prepares and commits a cut holding b's session at its current
// revision, and returns the checkpoint's location and id.
func takeServerCheckpoint(ctx context.Context, t *testing.T, c *cluster, srv *envProc, b *episodeDriver) (string, string) {
	t.Helper()
	id := "ckpt-" + b.rollout
	prep, err := srv.ctl.Prepare(ctx, protocol.PrepareRequest{CheckpointID: id, Deadline: time.Now().Add(30 * time.Second)})
	require.NoError(t, err, "prepare")
	member := summaryOf(prep.Sessions, b.rollout)
	require.NotNil(t, member, "the cut holds %s: %+v", b.rollout, prep.Sessions)
	require.Equal(t, protocol.SessionSummary{RolloutID: b.rollout, Attempt: 0, Revision: b.revision,
		Env: b.env, Mode: b.mode}, *member)
	loc := filepath.Join(c.dir, id)
	com, err := srv.ctl.Commit(ctx, protocol.CommitRequest{CheckpointID: id, Location: loc})
	require.NoError(t, err, "commit")
	require.Equal(t, protocol.PhaseCommitted, com.Phase)
	require.Equal(t, len(prep.Sessions), com.Sessions)
	return loc, id
}

// expectParked checks that a restored server keeps admission closed until
// resume: even the new attempt is told to retry later.
func expectParked(ctx context.Context, t *testing.T, srv *envProc, b *episodeDriver) {
	t.Helper()
	_, err := srv.data.Session(ctx, b.rollout) // reads stay answered
	if err != nil {
		expectCode(t, http.StatusNotFound, protocol.CodeUnknownSession, err)
	}
	err = b.resendLast(ctx, t, srv, 1)
	expectCode(t, http.StatusServiceUnavailable, protocol.CodeParked, err)
}

func summaryOf(list []protocol.SessionSummary, rollout string) *protocol.SessionSummary {
	for i := range list {
		if list[i].RolloutID == rollout {
			return &list[i]
		}
	}
	return nil
}

func stats(ctx context.Context, t *testing.T, srv *envProc) protocol.Stats {
	t.Helper()
	st, err := srv.data.Stats(ctx)
	require.NoError(t, err)
	return st
}

func expectCode(t *testing.T, status int, code string, err error) {
	t.Helper()
	var re *protocol.RemoteError
	require.True(t, errors.As(err, &re), "want %d %s, got %v", status, code, err)
	require.Equal(t, status, re.Status, "status of %v", err)
	require.Equal(t, code, re.Code, "code of %v", err)
}

// envProc is one environment-server process and clients of it. Each process
// gets its own HTTP transport, so no pooled connection to a killed process
// is ever reused.
type envProc struct {
	c    *cluster
	p    *proc
	hc   *http.Client
	data *protocol.Client
	ctl  *protocol.ControlClient
}

// startEnvProc starts an environment server whose scratch files (sandbox
// directories) go under the test's temp dir, also when it is SIGKILLed.
func startEnvProc(t *testing.T, c *cluster) *envProc {
	t.Helper()
	tmp := filepath.Join(c.dir, "envtmp")
	require.NoError(t, os.MkdirAll(tmp, 0o755))
	p := c.startEnvServer("TMPDIR=" + tmp)
	hc := &http.Client{Transport: &http.Transport{}}
	return &envProc{c: c, p: p, hc: hc,
		data: protocol.NewDataClient(c.envURL, c.dataToken, hc),
		ctl:  protocol.NewControlClient(c.envURL, c.token, hc)}
}

// replace SIGKILLs the process and starts a fresh one on the same address.
func (e *envProc) replace(t *testing.T) *envProc {
	t.Helper()
	e.p.kill()
	e.hc.CloseIdleConnections()
	return startEnvProc(t, e.c)
}

// episode is what a run observes: everything compared between A and B.
type episode struct {
	Start       protocol.StartResponse
	Steps       []stepRecord
	Final       string // the policy's final answer (tools style)
	Verdict     envs.Verdict
	DenseReward float64
}

// stepRecord is one operation: what the policy sent and what it saw.
type stepRecord struct {
	Turn, Index int
	Tool        string
	Arguments   string
	Observation string // the observation, or the refusal as the model sees it
	Revision    int64
	Reward      float64
	Terminated  bool
	Truncated   bool
}

// episodeDriver is the agent loop of one rollout, as the workflow and its
// activities run it: the policy answers the conversation, each tool call
// (or gym action) is one operation, its observation goes back into the
// conversation.
type episodeDriver struct {
	env     string
	mode    envs.Mode
	pol     envs.Policy
	rollout string
	seed    int64
	task    json.RawMessage
	attempt int

	style    envs.Style
	tools    []string
	msgs     []envs.Message
	revision int64
	turn     int
	pending  []envs.ToolCall
	cursor   int
	done     bool
	ep       episode

	startReplayed bool
	// last is the last mutation applied (nil: only the start).
	last *protocol.OperateRequest
	// lastResp is its answer.
	lastResp protocol.OperateResponse
}

func newEpisodeDriver(ec envCase, rollout string, seed int64, task json.RawMessage) *episodeDriver {
	return &episodeDriver{env: ec.env, mode: ec.mode, pol: ec.policy, rollout: rollout, seed: seed, task: task}
}

func (d *episodeDriver) startRequest() protocol.StartRequest {
	return protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: d.rollout, Attempt: d.attempt, RequestID: protocol.SeedRequestID(d.rollout)},
		Env:      d.env, Seed: d.seed, Task: d.task,
	}
}

func (d *episodeDriver) start(ctx context.Context, t *testing.T, srv *envProc) {
	t.Helper()
	resp, err := srv.data.Start(ctx, d.startRequest())
	require.NoError(t, err, "start %s", d.rollout)
	d.startReplayed = resp.Replayed
	resp.Replayed = false
	d.ep.Start = resp
	d.revision = resp.Revision
	d.style = resp.Spec.Style
	if d.style == envs.StyleTools {
		for _, tl := range resp.Spec.Tools {
			d.tools = append(d.tools, tl.Name)
		}
	}
	if resp.Start.Instructions != "" {
		d.msgs = append(d.msgs, envs.Message{Role: "system", Content: resp.Start.Instructions})
	}
	d.msgs = append(d.msgs, envs.Message{Role: "user", Content: resp.Start.Observation})
}

// next runs until one operation was sent (or the episode is over): a
// policy answer when no call is pending, then the call at the cursor.
func (d *episodeDriver) next(ctx context.Context, t *testing.T, srv *envProc) {
	t.Helper()
	if d.pending == nil {
		d.turn++
		require.LessOrEqual(t, d.turn, equivMaxTurns, "episode of %s does not end", d.rollout)
		resp, err := d.pol.Respond(envs.PolicyRequest{Messages: d.msgs, Tools: d.tools, Seed: d.seed, Imperfection: equivImperfection})
		require.NoError(t, err, "policy of %s turn %d", d.rollout, d.turn)
		switch d.style {
		case envs.StyleGym:
			// The answer is the action; the assistant message keeps only the text.
			d.msgs = append(d.msgs, envs.Message{Role: "assistant", Content: resp.Content})
			args, err := json.Marshal(struct {
				Action string `json:"action"`
			}{resp.Content})
			require.NoError(t, err)
			d.pending = []envs.ToolCall{{ID: fmt.Sprintf("step-%d", d.turn), Name: envs.StepTool, Arguments: string(args)}}
		default:
			d.msgs = append(d.msgs, envs.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
			if len(resp.ToolCalls) == 0 {
				d.ep.Final = resp.Content
				d.done = true
				return
			}
			d.pending = resp.ToolCalls
		}
		d.cursor = 0
	}
	call := d.pending[d.cursor]
	req := protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: d.rollout, Attempt: d.attempt, RequestID: protocol.OperateRequestID(d.rollout, d.turn, d.cursor)},
		ExpectedRevision: d.revision,
		Tool:             call.Name,
		Arguments:        json.RawMessage(call.Arguments),
	}
	rec := stepRecord{Turn: d.turn, Index: d.cursor, Tool: call.Name, Arguments: call.Arguments}
	resp, err := srv.data.Operate(ctx, req)
	var re *protocol.RemoteError
	switch {
	case errors.As(err, &re) && re.Status == http.StatusUnprocessableEntity:
		// A refusal is what the model sees next; the state is unchanged.
		rec.Observation = "error: " + re.Code + ": " + re.Message
	case err != nil:
		require.NoError(t, err, "operate %s", req.RequestID)
	default:
		require.False(t, resp.Replayed, "operate %s was replayed", req.RequestID)
		d.revision = resp.Revision
		d.ep.DenseReward += resp.Outcome.Reward
		d.last, d.lastResp = &req, resp
		rec.Observation = resp.Outcome.Observation
		rec.Reward, rec.Terminated, rec.Truncated = resp.Outcome.Reward, resp.Outcome.Terminated, resp.Outcome.Truncated
	}
	rec.Revision = d.revision
	d.ep.Steps = append(d.ep.Steps, rec)
	if d.style == envs.StyleGym {
		d.msgs = append(d.msgs, envs.Message{Role: "user", Content: rec.Observation})
	} else {
		d.msgs = append(d.msgs, envs.Message{Role: "tool", ToolCallID: call.ID, Content: rec.Observation})
	}
	d.cursor++
	if d.cursor == len(d.pending) {
		d.pending, d.cursor = nil, 0
	}
	if rec.Terminated || rec.Truncated {
		d.pending, d.cursor, d.done = nil, 0, true
	}
}

func (d *episodeDriver) verify(ctx context.Context, t *testing.T, srv *envProc) {
	t.Helper()
	resp, err := srv.data.Verify(ctx, protocol.VerifyRequest{
		Identity:         protocol.Identity{RolloutID: d.rollout, Attempt: d.attempt, RequestID: protocol.VerifyRequestID(d.rollout)},
		ExpectedRevision: d.revision,
	})
	require.NoError(t, err, "verify %s", d.rollout)
	require.False(t, resp.Replayed, "verify of %s was replayed", d.rollout)
	d.ep.Verdict = resp.Verdict
}

// resendLast re-sends the last mutation applied (the start when there was
// none) with the same request id and body, as attempt. A successful answer
// must be the stored one, marked replayed.
func (d *episodeDriver) resendLast(ctx context.Context, t *testing.T, srv *envProc, attempt int) error {
	t.Helper()
	if d.last == nil {
		req := d.startRequest()
		req.Attempt = attempt
		resp, err := srv.data.Start(ctx, req)
		if err == nil {
			require.True(t, resp.Replayed, "re-sent start is a replay")
			resp.Replayed = false
			require.Equal(t, d.ep.Start, resp, "replayed start answer")
		}
		return err
	}
	req := *d.last
	req.Attempt = attempt
	resp, err := srv.data.Operate(ctx, req)
	if err == nil {
		require.True(t, resp.Replayed, "re-sent %s is a replay", req.RequestID)
		want := d.lastResp
		want.Replayed = true
		require.Equal(t, want, resp, "replayed answer of %s", req.RequestID)
	}
	return err
}

// newOperate sends an operation the run has not made, as attempt.
func (d *episodeDriver) newOperate(ctx context.Context, srv *envProc, attempt int) error {
	tool, args := envs.StepTool, `{"action":"stick"}`
	if len(d.tools) > 0 {
		tool, args = d.tools[0], `{}`
	}
	_, err := srv.data.Operate(ctx, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: d.rollout, Attempt: attempt, RequestID: protocol.OperateRequestID(d.rollout, equivMaxTurns+1, 0)},
		ExpectedRevision: d.revision,
		Tool:             tool,
		Arguments:        json.RawMessage(args),
	})
	return err
}
