package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/participants/remote"
)

const (
	token     = "remote-test-token"
	dataToken = "remote-test-data-token"
)

// standIn is a small NeMo Gym resources server: a counter per session
// (cookie session_id), seeded from the task's "start", raised by the "add"
// tool, scored by /verify against the task's "target". exportable makes it
// declare export/restore. It counts every call per route.
type standIn struct {
	exportable bool
	mu         sync.Mutex
	values     map[string]int
	next       int
	calls      map[string]int
	verified   []json.RawMessage // the bodies /verify received
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[r.URL.Path]++
	var body map[string]json.RawMessage
	_ = json.NewDecoder(r.Body).Decode(&body)
	sid := ""
	if c, err := r.Cookie("session_id"); err == nil {
		sid = c.Value
	}
	answer := func(v any) { _ = json.NewEncoder(w).Encode(v) }
	switch r.URL.Path {
	case remote.RouteCheckpoint:
		if !s.exportable {
			http.NotFound(w, r)
			return
		}
		answer(map[string]string{"checkpoint_mode": "export_restore"})
	case "/seed_session", remote.RouteRestore:
		var start int
		if r.URL.Path == remote.RouteRestore {
			var st struct {
				Value int `json:"value"`
			}
			_ = json.Unmarshal(body["state"], &st)
			start = st.Value
		} else {
			_ = json.Unmarshal(body["start"], &start)
		}
		s.next++
		id := fmt.Sprintf("s%d", s.next)
		s.values[id] = start
		http.SetCookie(w, &http.Cookie{Name: "session_id", Value: id})
		answer(map[string]any{})
	case "/add":
		var amount int
		if err := json.Unmarshal(body["amount"], &amount); err != nil || amount < 1 {
			w.WriteHeader(http.StatusUnprocessableEntity)
			answer(map[string]any{"error": map[string]string{"code": "bad_amount", "message": "amount must be positive"}})
			return
		}
		if amount == 99 {
			w.WriteHeader(http.StatusInternalServerError) // applied or not: nobody knows
			return
		}
		s.values[sid] += amount
		answer(map[string]int{"value": s.values[sid]})
	case remote.RouteExport:
		answer(map[string]any{"state": map[string]int{"value": s.values[sid]}})
	case "/verify":
		raw, _ := json.Marshal(body)
		s.verified = append(s.verified, raw)
		var target int
		_ = json.Unmarshal(body["target"], &target)
		reward := 0.0
		if s.values[sid] == target {
			reward = 1
		}
		answer(map[string]any{"reward": reward, "value": s.values[sid]})
	default:
		http.NotFound(w, r)
	}
}

func (s *standIn) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[path]
}

var addTool = []envs.Tool{{Name: "add", Description: "add amount", Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"}}}`)}}

// fixture is a stand-in remote behind an environment server.
type fixture struct {
	remote *standIn
	rurl   string
}

func newFixture(t *testing.T, exportable bool) *fixture {
	s := &standIn{exportable: exportable, values: map[string]int{}, calls: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &fixture{remote: s, rurl: srv.URL}
}

// server starts an environment server hosting the remote as "gym-counter".
func (f *fixture) server(t *testing.T, kind string) (*protocol.Client, *protocol.ControlClient) {
	t.Helper()
	env, err := remote.New(context.Background(), remote.Config{Name: "gym-counter", URL: f.rurl, Kind: kind, Tools: addTool,
		Timeout: 10 * time.Second}, nil)
	require.NoError(t, err)
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{env}, ControlToken: token, DataToken: dataToken,
		Name: "remote-env"})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return protocol.NewDataClient(hs.URL, dataToken, nil), protocol.NewControlClient(hs.URL, token, nil)
}

func add(ctx context.Context, c *protocol.Client, rollout string, attempt int, rev int64, amount int) (protocol.OperateResponse, error) {
	return c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID(rollout, attempt, fmt.Sprintf("%s/t%d/c0", rollout, rev)),
		ExpectedRevision: rev, Tool: "add", Arguments: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))})
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var re *protocol.RemoteError
	require.ErrorAs(t, err, &re)
	require.Equal(t, code, re.Code, "%v", err)
}

// TestNeMoGymThroughTheProtocol: seed, tool calls and verify reach the
// remote; a replayed request id is answered from its receipt and never
// forwarded twice; a remote 4xx is a refusal that changes nothing.
func TestNeMoGymThroughTheProtocol(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	c, _ := f.server(t, remote.KindNeMoGym)
	task := json.RawMessage(`{"start":1,"target":4,"responses_create_params":{"input":[{"role":"user","content":"Reach 4."}]}}`)
	st, err := c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("r", 0, "r/seed"), Env: "gym-counter", Task: task})
	require.NoError(t, err)
	require.Equal(t, envs.ModeRestartOnly, st.Spec.Mode, "a remote that declares nothing is restart-only")
	require.Equal(t, "Reach 4.", st.Start.Observation)

	first, err := add(ctx, c, "r", 0, 0, 3)
	require.NoError(t, err)
	require.JSONEq(t, `{"value":4}`, first.Outcome.Observation)
	again, err := add(ctx, c, "r", 0, 0, 3)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Outcome, again.Outcome)
	require.Equal(t, 1, f.remote.count("/add"), "a replay is never forwarded")

	_, err = c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t1/c0"), ExpectedRevision: 1, Tool: "add", Arguments: json.RawMessage(`{"amount":0}`)})
	requireCode(t, err, "bad_amount")
	v, err := c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("r", 0, "r/verify"), ExpectedRevision: 1})
	require.NoError(t, err)
	require.Equal(t, 1.0, v.Verdict.Reward)
	require.Len(t, f.remote.verified, 1)
	var body struct {
		Target   int `json:"target"`
		Response struct {
			Output []map[string]string `json:"output"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(f.remote.verified[0], &body))
	require.Equal(t, 4, body.Target, "verify gets the task back")
	require.Equal(t, []map[string]string{
		{"type": "function_call", "name": "add", "arguments": `{"amount":3}`},
		{"type": "function_call_output", "output": "{\"value\":4}\n"},
	}, body.Response.Output)
}

// TestUncertainCallPoisonsTheSession: a 5xx may or may not have been
// applied at the remote, so the session takes no more calls, and the retry
// is not forwarded.
func TestUncertainCallPoisonsTheSession(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	c, _ := f.server(t, remote.KindNeMoGym)
	_, err := c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("u", 0, "u/seed"), Env: "gym-counter", Task: json.RawMessage(`{"start":0}`)})
	require.NoError(t, err)
	_, err = add(ctx, c, "u", 0, 0, 99)
	requireCode(t, err, remote.CodeRemoteUncertain)
	_, err = add(ctx, c, "u", 0, 0, 99)
	requireCode(t, err, remote.CodeRemoteUncertain)
	_, err = add(ctx, c, "u", 0, 0, 1)
	requireCode(t, err, remote.CodeRemoteUncertain)
	require.Equal(t, 1, f.remote.count("/add"))
}

// checkpointAndRestore cuts the server at c, restores the cut into a fresh
// server for the same remote as attempt 1 of rollout, and resumes it.
func checkpointAndRestore(t *testing.T, f *fixture, kind string, cc *protocol.ControlClient, rollout string) (*protocol.Client, protocol.RestoreResponse) {
	t.Helper()
	ctx := context.Background()
	_, err := cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k", Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	loc := filepath.Join(t.TempDir(), "k")
	_, err = cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k", Location: loc})
	require.NoError(t, err)
	c2, cc2 := f.server(t, kind)
	res, err := cc2.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", Location: loc, Attempts: map[string]int{rollout: 1}})
	require.NoError(t, err)
	_, err = cc2.Resume(ctx, "k")
	require.NoError(t, err)
	return c2, res
}

// TestRestartOnlyRemoteStartsOver: a checkpoint holds no state of a
// restart-only remote; the restore lists the rollout as restarted, attempt
// 0 is refused, and attempt 1 starts over with a fresh remote session.
func TestRestartOnlyRemoteStartsOver(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	c, cc := f.server(t, remote.KindNeMoGym)
	start := protocol.StartRequest{Identity: envtest.ID("s", 0, "s/seed"), Env: "gym-counter", Task: json.RawMessage(`{"start":5}`)}
	_, err := c.Start(ctx, start)
	require.NoError(t, err)
	_, err = add(ctx, c, "s", 0, 0, 2)
	require.NoError(t, err)

	c2, res := checkpointAndRestore(t, f, remote.KindNeMoGym, cc, "s")
	require.Len(t, res.Restarted, 1)
	require.Empty(t, res.Restored)
	_, err = add(ctx, c2, "s", 0, 1, 1)
	requireCode(t, err, protocol.CodeStaleAttempt)
	start.Attempt = 1
	fresh, err := c2.Start(ctx, start)
	require.NoError(t, err)
	require.Equal(t, int64(0), fresh.Revision)
	require.Equal(t, 2, f.remote.count("/seed_session"), "the new attempt seeds a fresh remote session")
	out, err := add(ctx, c2, "s", 1, 0, 1)
	require.NoError(t, err)
	require.JSONEq(t, `{"value":6}`, out.Outcome.Observation, "the episode starts over from the task")
}

// TestDeclaredExportRestoreContinues: a remote that declares export/restore
// is export_restore; its session comes back with the remote's state.
func TestDeclaredExportRestoreContinues(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	c, cc := f.server(t, remote.KindNeMoGym)
	st, err := c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("e", 0, "e/seed"), Env: "gym-counter", Task: json.RawMessage(`{"start":1,"target":5}`)})
	require.NoError(t, err)
	require.Equal(t, envs.ModeExportRestore, st.Spec.Mode)
	_, err = add(ctx, c, "e", 0, 0, 2)
	require.NoError(t, err)

	c2, res := checkpointAndRestore(t, f, remote.KindNeMoGym, cc, "e")
	require.Len(t, res.Restored, 1)
	again, err := add(ctx, c2, "e", 1, 0, 2)
	require.NoError(t, err)
	require.True(t, again.Replayed, "the request applied before the cut replays")
	out, err := add(ctx, c2, "e", 1, 1, 2)
	require.NoError(t, err)
	require.JSONEq(t, `{"value":5}`, out.Outcome.Observation, "the remote state continues from the cut")
	v, err := c2.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("e", 1, "e/verify"), ExpectedRevision: 2})
	require.NoError(t, err)
	require.Equal(t, 1.0, v.Verdict.Reward)
}

// gymStandIn is a reset/step server: walk right to the goal.
func gymStandIn(t *testing.T) (string, *standIn) {
	s := &standIn{values: map[string]int{}, calls: map[string]int{}}
	goals := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls[r.URL.Path]++
		var body struct {
			Seed    int64                      `json:"seed"`
			Options map[string]json.RawMessage `json:"options"`
			Action  string                     `json:"action"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		c, _ := r.Cookie("env")
		switch r.URL.Path {
		case "/reset":
			s.next++
			sid := fmt.Sprint(s.next)
			var goal int
			_ = json.Unmarshal(body.Options["goal"], &goal)
			goals[sid] = goal + int(body.Seed%2)
			http.SetCookie(w, &http.Cookie{Name: "env", Value: sid})
			_ = json.NewEncoder(w).Encode(map[string]any{"observation": fmt.Sprintf("pos=0 goal=%d", goals[sid]), "info": map[string]any{}})
		case "/step":
			if body.Action != "right" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			s.values[c.Value]++
			done := s.values[c.Value] == goals[c.Value]
			reward := 0.0
			if done {
				reward = 1
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"observation": fmt.Sprintf("pos=%d", s.values[c.Value]), "reward": reward, "terminated": done, "truncated": false})
		case "/close":
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, s
}

// TestGymnasiumThroughTheProtocol: reset/step behind the protocol, with
// the step tool, dense rewards, termination and a close at the end.
func TestGymnasiumThroughTheProtocol(t *testing.T) {
	ctx := context.Background()
	url, s := gymStandIn(t)
	f := &fixture{rurl: url}
	c, _ := f.server(t, remote.KindGymnasium)
	st, err := c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("g", 0, "g/seed"), Env: "gym-counter", Seed: 1, Task: json.RawMessage(`{"goal":1}`)})
	require.NoError(t, err)
	require.Equal(t, envs.StyleGym, st.Spec.Style)
	require.Equal(t, "pos=0 goal=2", st.Start.Observation)
	step := func(rev int64, action string) (protocol.OperateResponse, error) {
		return c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("g", 0, fmt.Sprintf("g/t%d/c0", rev)), ExpectedRevision: rev,
			Tool: envs.StepTool, Arguments: json.RawMessage(fmt.Sprintf(`{"action":%q}`, action))})
	}
	_, err = step(0, "left")
	requireCode(t, err, remote.CodeRemoteRefused)
	one, err := step(0, "right")
	require.NoError(t, err)
	require.Equal(t, envs.Outcome{Observation: "pos=1"}, one.Outcome)
	two, err := step(1, "right")
	require.NoError(t, err)
	require.Equal(t, envs.Outcome{Observation: "pos=2", Reward: 1, Terminated: true}, two.Outcome)
	v, err := c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("g", 0, "g/verify"), ExpectedRevision: 2})
	require.NoError(t, err)
	require.Equal(t, 1.0, v.Verdict.Reward)
	require.Equal(t, 1, s.count("/close"))
}

func TestNewNeedsAReachableRemote(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := remote.New(context.Background(), remote.Config{Name: "x", URL: url, Kind: remote.KindGymnasium, Timeout: time.Second}, nil)
	require.ErrorContains(t, err, "cannot reach")
}

func TestParseSpec(t *testing.T) {
	tools := filepath.Join(t.TempDir(), "tools.json")
	require.NoError(t, os.WriteFile(tools, []byte(`[{"type":"function","name":"add","parameters":{"type":"object"}},{"name":"get"}]`), 0o644))
	tests := []struct {
		spec string
		want string // error substring; "" for valid
	}{
		{"name=a,url=http://h:1,kind=gymnasium", ""},
		{"name=a,url=http://h:1/,kind=nemo-gym,tools=" + tools + ",timeout=5s", ""},
		{"name=a,url=http://h:1,kind=nemo-gym", "needs its tools"},
		{"url=http://h:1,kind=gymnasium", "no name"},
		{"name=a,url=ftp://h,kind=gymnasium", "not an http(s) URL"},
		{"name=a,url=http://h:1,kind=chess", `kind "chess"`},
		{"name=a,url=http://h:1,kind=gymnasium,color=red", `unknown key "color"`},
		{"name=a,url=http://h:1,kind=gymnasium,timeout=-1s", "not a positive duration"},
		{"name=a,url", "not key=value"},
		{"name=a,url=http://h:1,kind=nemo-gym,tools=" + tools + "x", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			cfg, err := remote.ParseSpec(tt.spec)
			if tt.want != "" {
				require.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.False(t, strings.HasSuffix(cfg.URL, "/"))
			if cfg.Kind == remote.KindNeMoGym {
				require.Equal(t, []string{"add", "get"}, []string{cfg.Tools[0].Name, cfg.Tools[1].Name})
				require.Equal(t, 5*time.Second, cfg.Timeout)
			}
		})
	}
}
