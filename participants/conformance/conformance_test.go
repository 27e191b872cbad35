package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/internal/testsupport/brokenparticipant"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

const (
	dataToken    = "conformance-test-data-token"
	controlToken = "conformance-test-control-token"
)

// retiredSessions is the bound on verified sessions the test servers keep
// the receipts of, small so the kit can drive past it (R3).
const retiredSessions = 3

// goParticipant serves a Go envserver (counter and arithmetic, both tokens
// or, with open, no data token, and the sandbox for R27) through wrap,
// with a second instance without a control token for R2; mod changes the
// servers' configuration.
func goParticipant(t *testing.T, open bool, wrap func(http.Handler) http.Handler, mod ...func(*envserver.ServerConfig)) conformance.Config {
	t.Helper()
	cfg := envserver.ServerConfig{Envs: []envs.Environment{counter.New(), arithmetic.New(), sandbox.New()}, Name: "conformance", ControlToken: controlToken,
		RetiredSessions: retiredSessions}
	for _, m := range mod {
		m(&cfg)
	}
	if open {
		cfg.InsecureNoDataAuth = true
	} else {
		cfg.DataToken = dataToken
	}
	srv, err := envserver.NewServer(cfg)
	require.NoError(t, err)
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	cfg.ControlToken = ""
	noControl, err := envserver.NewServer(cfg)
	require.NoError(t, err)
	nc := httptest.NewServer(noControl)
	t.Cleanup(nc.Close)
	return conformance.Config{URL: hs.URL, DataToken: dataToken, ControlToken: controlToken, Dir: t.TempDir(),
		Env: conformance.DefaultEnv, Task: json.RawMessage(conformance.DefaultTask), Tool: conformance.DefaultTool,
		Args: json.RawMessage(conformance.DefaultArgs), RestartEnv: conformance.DefaultRestartEnv,
		RestartTask: json.RawMessage(conformance.DefaultRestartTask), RetiredSessions: retiredSessions, NoControlURL: nc.URL,
		ReplayEnv: conformance.DefaultReplayEnv, ReplayTask: json.RawMessage(conformance.DefaultReplayTask), ReplayCalls: defaultCalls(t)}
}

func defaultCalls(t *testing.T) []conformance.Call {
	t.Helper()
	calls, err := conformance.ParseCalls(conformance.DefaultReplayCalls)
	require.NoError(t, err)
	return calls
}

func run(t *testing.T, cfg conformance.Config) []conformance.Result {
	t.Helper()
	res, err := conformance.Run(context.Background(), cfg)
	require.NoError(t, err, "conformance run")
	var out bytes.Buffer
	require.NoError(t, conformance.Print(&out, res))
	t.Logf("conformance results:\n%s", out.String())
	return res
}

// TestGoEnvServerConforms is the CI run of the kit against the Go
// envserver: every rule passes, and every error answer it gave is the one
// docs/protocol/openapi.json documents (R16). The kit leaves no live
// session behind: a checkpoint of the server afterwards finds none of the
// kit's rollouts to count as members (it used to find one per rule, and
// the checkpoint aborted MemberMissing).
func TestGoEnvServerConforms(t *testing.T) {
	cfg := goParticipant(t, false, nil)
	res := run(t, cfg)
	require.Len(t, res, len(conformance.Rules())+1, "one result per rule, and the clean-up")
	for _, r := range res {
		assert.Equal(t, conformance.Pass, r.Verdict, "%s %s: %s %s", r.ID, r.Name, r.Verdict, r.Evidence)
	}
	assert.Equal(t, conformance.CleanupID, res[len(res)-1].ID)

	cc := protocol.NewControlClient(cfg.URL, controlToken, nil)
	prep, err := cc.Prepare(context.Background(), protocol.PrepareRequest{CheckpointID: "after-the-kit", Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	for _, s := range prep.Sessions {
		assert.True(t, s.Retired, "a checkpoint after the kit counts %s (attempt %d, live) as a member", s.RolloutID, s.Attempt)
	}
	_, err = cc.Resume(context.Background(), "after-the-kit")
	require.NoError(t, err)
}

// TestBrokenParticipantsFailTheRightRule: each deliberately broken
// participant fails exactly the rule it breaks. The last three are what a
// participant written from the documents of before could get wrong and
// the kit did not see, though the coordinator refused it: capabilities it
// does not read, an artifact it cannot open, and a live rollback under the
// checkpoint's own id.
func TestBrokenParticipantsFailTheRightRule(t *testing.T) {
	servedRestartOnly := func(c *envserver.ServerConfig) { c.RestartOnly = []string{sandbox.Name} }
	for _, tc := range []struct {
		name     string
		open     bool
		wrap     func(http.Handler) http.Handler
		mod      []func(*envserver.ServerConfig)
		wantFail []string
	}{
		{"re-applies a replayed request", false, reapplyReplays, nil, []string{"R3"}},
		{"lets the data plane install attempts (a server before the data-plane fence fix)", false, installOnDemand, nil, []string{"R7"}},
		{"data plane without a token", true, nil, nil, []string{"R1"}},
		{"capabilities of another component and without the features a coordinator needs", false,
			brokenparticipant.Capabilities(func(c *protocol.Capabilities) { c.Component, c.Features = "env-server", nil }), nil, []string{"R17"}},
		{"commits plain JSON and a manifest, not the artifact format", false, brokenparticipant.PlainArtifact, nil, []string{"R26"}},
		{"keeps R11 without the live-rollback exception", false, brokenparticipant.LiteralR11, nil, []string{"R18"}},
		{"declares replay but starts its sessions over", false, claimReplay, []func(*envserver.ServerConfig){servedRestartOnly}, []string{"R27"}},
		{"counts a replay's re-applied mutations as applied", false, countReapplied, nil, []string{"R27"}},
		{"lists prepare_lease_v1 but ignores the prepare's lease", false, dropLease, nil, []string{"R28"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failed []string
			for _, r := range run(t, goParticipant(t, tc.open, tc.wrap, tc.mod...)) {
				if r.Verdict == conformance.Fail {
					failed = append(failed, r.ID)
				}
			}
			require.True(t, slices.Equal(failed, tc.wantFail), "failed rules %v, want exactly %v", failed, tc.wantFail)
		})
	}
}

// reapplyReplays breaks R3: an operate that repeats one already forwarded
// (same JSON, whatever its formatting) is sent on under a fresh request id,
// so the participant applies it again instead of replaying it.
func reapplyReplays(next http.Handler) http.Handler {
	var mu sync.Mutex
	seen := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/operate") {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var fields map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber() // numbers as written: 1.0 stays 1.0
		if dec.Decode(&fields) == nil {
			canon, _ := json.Marshal(fields) // sorted keys: formatting does not matter
			mu.Lock()
			again := seen[string(canon)]
			seen[string(canon)] = true
			mu.Unlock()
			if id, ok := fields["request_id"].(string); again && ok {
				fields["request_id"] = id + "#again"
				body, _ = json.Marshal(fields)
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// installOnDemand breaks R7 the way the server behaved before the data-plane fence fix: a
// data-plane request above the installed attempt installs it (here through
// the control plane, behind the caller's back) and goes through.
func installOnDemand(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || strings.HasPrefix(r.URL.Path, protocol.ControlPrefix) {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, clone(r, body))
		var eb protocol.ErrorBody
		var id protocol.Identity
		if json.Unmarshal(rec.Body.Bytes(), &eb) == nil && eb.Error.Code == protocol.CodeAttemptNotInstalled && json.Unmarshal(body, &id) == nil {
			auth, _ := json.Marshal(protocol.AuthoriseRequest{Attempt: id.Attempt})
			req := httptest.NewRequest(http.MethodPost, "/v1/control/sessions/x/authorise", bytes.NewReader(auth))
			req.SetPathValue("rollout_id", id.RolloutID)
			req.URL.Path = "/v1/control/sessions/" + id.RolloutID + "/authorise"
			req.Header.Set("Authorization", "Bearer "+controlToken)
			next.ServeHTTP(httptest.NewRecorder(), req)
			rec = httptest.NewRecorder()
			next.ServeHTTP(rec, clone(r, body))
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

func clone(r *http.Request, body []byte) *http.Request {
	c := r.Clone(r.Context())
	c.Body, c.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return c
}

// claimReplay breaks R27 as a participant that declares replay without
// doing it: the server serves the sandbox restart_only, and every answer
// that names its mode says replay.
func claimReplay(next http.Handler) http.Handler {
	return rewrite(next, func(_ *http.Request, _ int, body []byte) []byte {
		return bytes.ReplaceAll(body, []byte(`"mode":"restart_only"`), []byte(`"mode":"replay"`))
	})
}

// countReapplied breaks R27 as a participant whose replay counts the
// mutations it re-applies as applied.
func countReapplied(next http.Handler) http.Handler {
	return rewrite(next, func(r *http.Request, status int, body []byte) []byte {
		if r.URL.Path != "/v1/stats" || status != http.StatusOK {
			return body
		}
		var st protocol.Stats
		if json.Unmarshal(body, &st) != nil {
			return body
		}
		st.Applied += st.Reapplied
		out, _ := json.Marshal(st)
		return out
	})
}

// rewrite passes each answer of next through edit.
func rewrite(next http.Handler, edit func(r *http.Request, status int, body []byte) []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := edit(r, rec.Code, rec.Body.Bytes())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

// dropLease breaks R28: a prepare's lease_ms is dropped on the way in, so
// the participant holds the session for its default lease and takes a
// bad lease without a word, while it lists prepare_lease_v1.
func dropLease(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != strings.TrimPrefix(protocol.RouteControlPrepare, http.MethodPost+" ") {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req protocol.PrepareRequest
		if json.Unmarshal(body, &req) == nil && req.LeaseMillis != 0 {
			req.LeaseMillis = 0
			body, _ = json.Marshal(req)
		}
		next.ServeHTTP(w, clone(r, body))
	})
}
