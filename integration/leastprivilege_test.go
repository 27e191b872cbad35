package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Least privilege, tried by an attacker who holds only the gateway's
// trainer token (or can start workflows on Temporal): no request field may
// make the worker, the coordinator or the gateway send a secret to a host
// the operator did not configure, and no dataset_path may read a file
// outside the gateway's dataset root. Every attack here succeeded before
// the destinations, roles and dataset root existed.

// The secrets the processes of these tests hold; none may reach the
// attacker.
const (
	lpTrainerToken  = "lp-trainer-token"
	lpOperatorToken = "lp-operator-token"
	lpAPIKey        = "lp-model-api-key"
	lpAWSKeyID      = "AKIALPSECRETKEYID"
	lpAWSSecret     = "lp-aws-secret-access-key"
)

// attacker is a real HTTP listener standing in for a host the operator
// never configured: it records every request and answers 503 (so a client
// that reached it would keep trying).
type attacker struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
	hit  chan struct{}
	once sync.Once
}

func newAttacker(t *testing.T) *attacker {
	t.Helper()
	a := &attacker{hit: make(chan struct{})}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, fmt.Sprintf("%s %s Authorization=%q X-Amz-Security-Token=%q",
			r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")))
		a.mu.Unlock()
		a.once.Do(func() { close(a.hit) })
		http.Error(w, "attacker", http.StatusServiceUnavailable)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *attacker) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// settle runs call until it returns its error, failing the test as soon as
// the attacker is contacted instead (a client that reached it may retry
// forever).
func (a *attacker) settle(t *testing.T, what string, timeout time.Duration, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-a.hit:
		t.Fatalf("%s: the attacker was contacted: %q", what, a.requests())
	case <-time.After(timeout):
		t.Fatalf("%s: no answer within %s", what, timeout)
	}
	return nil
}

// lpStack is the stack of these tests: a worker holding a data token, a
// control token, a model API key and AWS credentials, with no destination
// allowed beyond its own environment server and policy endpoint; and a
// gateway with a trainer token, an operator token and a dataset root.
type lpStack struct {
	*cluster
	gatewayURL  string
	datasetRoot string
}

func newLPStack(t *testing.T) *lpStack {
	t.Helper()
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer()
	env := append(stack.WorkerEnv{
		HostPort: c.hostPort, EnvURL: c.envURL, ModelURL: c.modelURL, Store: c.store,
		ControlToken: c.token, DataToken: c.dataToken,
	}.Environ(),
		"TURNSTILE_MODEL_API_KEY="+lpAPIKey,
		"AWS_ACCESS_KEY_ID="+lpAWSKeyID, "AWS_SECRET_ACCESS_KEY="+lpAWSSecret, "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true")
	p := c.start("worker", filepath.Join(bins.dir, "worker"), nil, env...)
	c.waitFor("worker polling", p, 60*time.Second, func() bool { return c.hasPoller() })

	s := &lpStack{cluster: c, datasetRoot: filepath.Join(c.dir, "datasets")}
	require.NoError(t, os.MkdirAll(s.datasetRoot, 0o755))
	ready := filepath.Join(c.dir, "lp-gateway-ready")
	gp := c.start("gateway", filepath.Join(bins.dir, "gateway"),
		[]string{"--addr", "127.0.0.1:0", "--ready-file", ready, "--token", lpTrainerToken,
			"--checkpoint-root", filepath.Join(c.dir, "checkpoints"), "--log-level", "warn"},
		"TEMPORAL_ADDRESS="+c.hostPort, "TEMPORAL_NAMESPACE=default",
		"TURNSTILE_TRANSCRIPT_DIR="+c.store, "TURNSTILE_CONTROL_TOKEN="+c.token,
		"TURNSTILE_ENV_URL="+c.envURL, "TURNSTILE_MODEL_BASE_URL="+c.modelURL,
		"TURNSTILE_GATEWAY_OPERATOR_TOKEN="+lpOperatorToken, "TURNSTILE_DATASET_ROOT="+s.datasetRoot)
	c.waitFor("gateway", gp, 30*time.Second, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		s.gatewayURL = strings.TrimSpace(string(data))
		return healthy(s.gatewayURL + "/healthz")
	})
	return s
}

// as is a gateway client holding token.
func (s *lpStack) as(t *testing.T, token string) gw {
	return gw{t: t, base: s.gatewayURL, token: token}
}

// errorOf decodes an error answer.
func errorOf(t *testing.T, raw []byte) gateway.ErrorDetail {
	t.Helper()
	var eb gateway.ErrorBody
	require.NoError(t, json.Unmarshal(raw, &eb), "%s", raw)
	return eb.Error
}

// TestLeastPrivilege holds the attacks of a trainer-token holder, each of
// which worked before: secrets sent wherever a request said (the data token
// by env_url, the model API key by model_url, the control token by a
// checkpoint's or a resume's participants, AWS credentials by a storage
// endpoint), operator routes open to the trainer token, and dataset_path
// reading any file of the gateway's host. Each attack is a subtest of its
// own, with an attacker of its own.
func TestLeastPrivilege(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	s := newLPStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Each subtest calls the gateway with its own gw (its t).
	trainerGW := func(t *testing.T) gw { return s.as(t, lpTrainerToken) }
	operatorGW := func(t *testing.T) gw { return s.as(t, lpOperatorToken) }

	t.Run("roles", func(t *testing.T) {
		ck := gateway.CheckpointRequest{RequestID: "lp-ck-role", CheckpointID: "lp-role", Set: "lp-none", Participants: []string{s.envURL}, Timeout: "30s"}
		status, raw := s.as(t, "").do(ctx, "POST", "/v1/checkpoints", ck, nil)
		require.Equal(t, http.StatusUnauthorized, status, "%s", raw)
		for _, call := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/checkpoints", ck},
			{"GET", "/v1/checkpoints/lp-role", nil},
			{"POST", "/v1/restores", gateway.RestoreRequest{RequestID: "lp-rs-role", CheckpointID: "lp-role", Participants: []string{s.envURL}}},
			{"GET", "/v1/restores/lp-role", nil},
			{"POST", "/v1/resumes", gateway.ResumeRequest{RequestID: "lp-rm-role", Set: "lp-none", CheckpointID: "lp-role", Participants: []string{s.envURL}}},
		} {
			status, raw := trainerGW(t).do(ctx, call.method, call.path, call.body, nil)
			require.Equal(t, http.StatusForbidden, status, "%s %s with the trainer token: %s", call.method, call.path, raw)
			e := errorOf(t, raw)
			require.Equal(t, "forbidden", e.Code)
			require.Contains(t, e.Message, "operator", "the refusal names the role needed")
		}
		status, raw = operatorGW(t).do(ctx, "GET", "/v1/checkpoints/lp-role", nil, nil)
		require.Equal(t, http.StatusNotFound, status, "the operator token opens the operator routes: %s", raw)
		status, raw = trainerGW(t).do(ctx, "GET", "/v1/sets/lp-none", nil, nil)
		require.Equal(t, http.StatusNotFound, status, "the trainer token opens the trainer routes: %s", raw)
	})

	// Through the gateway: each request is refused before anything is
	// started or sent, naming the setting that would allow it.
	refusedAtGateway := func(t *testing.T, evil *attacker, g func(*testing.T) gw, path, field, setting string, body any) {
		t.Helper()
		status, raw := g(t).do(ctx, "POST", path, body, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", path, raw)
		e := errorOf(t, raw)
		require.Equal(t, field, e.Field, "%s", raw)
		require.Contains(t, e.Message, setting, "the refusal names the setting to change")
		require.Empty(t, evil.requests())
	}
	t.Run("env_url gets no data token", func(t *testing.T) {
		evil := newAttacker(t)
		refusedAtGateway(t, evil, trainerGW, "/v1/sets", "env_url", "TURNSTILE_ALLOWED_ENV_URLS",
			gateway.SubmitRequest{RequestID: "lp-env", Set: "lp-env", Envs: []string{"counter"}, Count: 1, EnvURL: evil.srv.URL})
	})
	t.Run("model_url gets no API key", func(t *testing.T) {
		evil := newAttacker(t)
		refusedAtGateway(t, evil, trainerGW, "/v1/sets", "model_url", "TURNSTILE_ALLOWED_MODEL_URLS",
			gateway.SubmitRequest{RequestID: "lp-model", Set: "lp-model", Envs: []string{"counter"}, Count: 1, ModelURL: evil.srv.URL + "/v1"})
	})
	t.Run("a checkpoint's participants get no control token", func(t *testing.T) {
		evil := newAttacker(t)
		ck := gateway.CheckpointRequest{RequestID: "lp-ck", CheckpointID: "lp-ck", Set: "lp-none", Participants: []string{evil.srv.URL}, Timeout: "30s"}
		status, raw := trainerGW(t).do(ctx, "POST", "/v1/checkpoints", ck, nil)
		require.Equal(t, http.StatusForbidden, status, "%s", raw)
		refusedAtGateway(t, evil, operatorGW, "/v1/checkpoints", "participants", "TURNSTILE_ALLOWED_PARTICIPANTS", ck)
		refusedAtGateway(t, evil, operatorGW, "/v1/restores", "participants", "TURNSTILE_ALLOWED_PARTICIPANTS",
			gateway.RestoreRequest{RequestID: "lp-rs", CheckpointID: "lp-ck", Participants: []string{evil.srv.URL}})
	})
	t.Run("a resume's participants get no control token", func(t *testing.T) {
		evil := newAttacker(t)
		rm := gateway.ResumeRequest{RequestID: "lp-rm", Set: "lp-none", CheckpointID: "lp-ck", Participants: []string{evil.srv.URL}}
		status, raw := trainerGW(t).do(ctx, "POST", "/v1/resumes", rm, nil)
		require.Equal(t, http.StatusForbidden, status, "%s", raw)
		refusedAtGateway(t, evil, operatorGW, "/v1/resumes", "participants", "TURNSTILE_ALLOWED_PARTICIPANTS", rm)
	})
	t.Run("a watchdog's or a schedule's servers get no control token", func(t *testing.T) {
		evil := newAttacker(t)
		wd := gateway.WatchdogRequest{RequestID: "lp-wd", Participants: []string{evil.srv.URL}}
		status, raw := trainerGW(t).do(ctx, "POST", "/v1/sets/lp-none/watchdog", wd, nil)
		require.Equal(t, http.StatusForbidden, status, "%s", raw)
		refusedAtGateway(t, evil, operatorGW, "/v1/sets/lp-none/watchdog", "participants", "TURNSTILE_ALLOWED_PARTICIPANTS", wd)
		refusedAtGateway(t, evil, operatorGW, "/v1/sets/lp-none/watchdog", "standby", "TURNSTILE_ALLOWED_PARTICIPANTS",
			gateway.WatchdogRequest{RequestID: "lp-wd2", Participants: []string{s.envURL}, Standby: []string{evil.srv.URL}})
		sch := gateway.ScheduleRequest{RequestID: "lp-sch", Every: "1s", Participants: []string{evil.srv.URL}}
		status, raw = trainerGW(t).do(ctx, "POST", "/v1/sets/lp-none/schedule", sch, nil)
		require.Equal(t, http.StatusForbidden, status, "%s", raw)
		refusedAtGateway(t, evil, operatorGW, "/v1/sets/lp-none/schedule", "participants", "TURNSTILE_ALLOWED_PARTICIPANTS", sch)
	})

	// Started on Temporal directly, past the gateway: the worker and the
	// coordinator refuse by themselves.
	runIt := func(t *testing.T, evil *attacker, in rollout.Input) error {
		run := s.submit(ctx, in)
		return evil.settle(t, "rollout "+in.RolloutID, 2*time.Minute, func() error { return run.Get(ctx, nil) })
	}
	tc := trainer.New(s.client, rollout.TaskQueue)
	checkpointIt := func(t *testing.T, evil *attacker, id, root string, participants ...string) error {
		return evil.settle(t, "checkpoint "+id, 2*time.Minute, func() error {
			_, err := tc.Checkpoint(ctx, trainer.CheckpointRequest{Set: "lp-direct", CheckpointID: id, Root: root,
				Participants: participants, Timeout: 30 * time.Second}, true)
			return err
		})
	}
	t.Run("worker: env.url gets no data token", func(t *testing.T) {
		evil := newAttacker(t)
		in := counterInput("lp-direct", 0, 2)
		in.Env.URL = evil.srv.URL
		require.ErrorContains(t, runIt(t, evil, in), "TURNSTILE_ALLOWED_ENV_URLS")
		require.Empty(t, evil.requests())
	})
	t.Run("worker: policy.base_url gets no API key", func(t *testing.T) {
		evil := newAttacker(t)
		in := counterInput("lp-direct", 1, 2)
		in.Policy.BaseURL = evil.srv.URL + "/v1"
		require.ErrorContains(t, runIt(t, evil, in), "TURNSTILE_ALLOWED_MODEL_URLS")
		require.Empty(t, evil.requests())
	})
	t.Run("coordinator: participants get no control token", func(t *testing.T) {
		evil := newAttacker(t)
		require.ErrorContains(t, checkpointIt(t, evil, "lp-direct-ck", filepath.Join(s.dir, "checkpoints"), evil.srv.URL), "TURNSTILE_ALLOWED_PARTICIPANTS")
		require.Empty(t, evil.requests())
	})
	t.Run("coordinator: a storage endpoint gets no signed request", func(t *testing.T) {
		evil := newAttacker(t)
		root := "s3://lp-bucket/ck?endpoint=" + evil.srv.URL + "&region=us-east-1&use_path_style=true"
		require.ErrorContains(t, checkpointIt(t, evil, "lp-direct-s3", root, s.envURL), "TURNSTILE_ALLOWED_STORE_ENDPOINTS")
		require.Empty(t, evil.requests())
	})

	// dataset_path: files outside the root are refused without being
	// touched (no echo, no existence oracle, no endless read); inside it,
	// regular files only, and a bad row is reported by its line number
	// without its content.
	outside := filepath.Join(s.dir, "secret")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	shadow := filepath.Join(outside, "shadow")
	require.NoError(t, os.WriteFile(shadow, []byte("root:$6$SECRETSALT$SECRETHASH:19000:0:99999:7:::\n{\"SECRET_KEY_NAME\":1}\n"), 0o600))
	inside := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(s.datasetRoot, name), []byte(content), 0o644))
	}
	inside("good.jsonl", `{"id":"a","env":"counter","task":{"target":1}}`+"\n")
	inside("bad.jsonl", `{"id":"a","env":"counter","task":{"target":1}}`+"\n"+
		`{"id":"b","env":"counter","task":{"target":1},"SECRET_FIELD_NAME":1}`+"\n"+
		"hunter2-SECRET-LINE\n"+
		`{"id":"c","env":"SECRET_ENV_NAME","task":{"target":1}}`+"\n")
	require.NoError(t, os.Symlink(shadow, filepath.Join(s.datasetRoot, "link.jsonl")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(s.datasetRoot, "fifo.jsonl"), 0o644))
	// Each refusal answers promptly: a read that never ends (a device, a
	// FIFO) would leave the request without an answer.
	submit := func(t *testing.T, set, path string) (int, gateway.ErrorDetail) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		defer rcancel()
		status, raw := trainerGW(t).do(rctx, "POST", "/v1/sets",
			gateway.SubmitRequest{RequestID: "lp-" + set, Set: set, DatasetPath: path, Repeats: 1}, nil)
		if status == http.StatusOK {
			return status, gateway.ErrorDetail{}
		}
		require.NotContains(t, string(raw), "SECRET", "the answer echoes file content")
		require.NotContains(t, string(raw), "hunter2")
		require.NotContains(t, string(raw), "root:")
		return status, errorOf(t, raw)
	}
	t.Run("dataset_path outside the root: no content", func(t *testing.T) {
		status, e := submit(t, "lp-ds-shadow", shadow)
		require.Equal(t, http.StatusBadRequest, status)
		require.Equal(t, "dataset_path", e.Field)
	})
	t.Run("dataset_path outside the root: no existence oracle", func(t *testing.T) {
		missing := filepath.Join(outside, "nothing-here")
		_, there := submit(t, "lp-ds-there", shadow)
		_, absent := submit(t, "lp-ds-absent", missing)
		require.Equal(t, strings.ReplaceAll(there.Message, shadow, "P"), strings.ReplaceAll(absent.Message, missing, "P"),
			"a file that exists and one that does not are refused alike")
	})
	t.Run("dataset_path: devices, FIFOs, links out and .. are refused promptly", func(t *testing.T) {
		for _, path := range []string{"/dev/urandom", "fifo.jsonl", "link.jsonl", "../secret/shadow"} {
			status, e := submit(t, "lp-ds-x", path)
			require.Equal(t, http.StatusBadRequest, status, "%s: %+v", path, e)
			require.Equal(t, "dataset_path", e.Field, "%s", path)
		}
	})
	t.Run("dataset_path inside the root: bad rows by line, no content", func(t *testing.T) {
		status, e := submit(t, "lp-ds-bad", "bad.jsonl")
		require.Equal(t, http.StatusBadRequest, status)
		for _, line := range []string{"line 2", "line 3", "line 4"} {
			require.Contains(t, e.Message, line, "a bad row is reported by its line")
		}
		status, e = submit(t, "lp-ds-good", "good.jsonl")
		require.Equal(t, http.StatusOK, status, "%+v", e)
		status, e = submit(t, "lp-ds-good-abs", filepath.Join(s.datasetRoot, "good.jsonl"))
		require.Equal(t, http.StatusOK, status, "an absolute path inside the root: %+v", e)
	})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
