package envserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestNewServerRefusesTokenConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  envserver.ServerConfig
		want string
	}{
		"no data token":        {envserver.ServerConfig{ControlToken: "c"}, "no data-plane token"},
		"equal tokens":         {envserver.ServerConfig{DataToken: "same", ControlToken: "same"}, "equal"},
		"token and insecure":   {envserver.ServerConfig{DataToken: "d", InsecureNoDataAuth: true}, "exclude"},
		"no tokens, no opt-in": {envserver.ServerConfig{}, "--insecure-no-data-auth"},
	} {
		tc.cfg.Envs = []envs.Environment{counter.New()}
		_, err := envserver.NewServer(tc.cfg)
		assert.ErrorContains(t, err, tc.want, "%s: NewServer error %v, want one naming %q", name, err, tc.want)
	}
	_, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()}, InsecureNoDataAuth: true})
	assert.NoError(t, err, "explicit unauthenticated data plane refused")
}

// TestDataPlaneAuthentication: every data-plane route wants the data token
// (R1), the control token opens only the control plane (R2), and a refused
// caller changes nothing, not even the refused counter.
func TestDataPlaneAuthentication(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	before := f.stats(t)
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/envs", ""},
		{http.MethodGet, "/v1/stats", ""},
		{http.MethodGet, "/v1/sessions/r1", ""},
		{http.MethodPost, "/v1/sessions", `{"rollout_id":"r1","attempt":9,"request_id":"r1/seed","env":"counter","task":{"target":1}}`},
		{http.MethodPost, "/v1/sessions/r1/operate", `{"rollout_id":"r1","attempt":0,"request_id":"x","expected_revision":0,"tool":"increment","arguments":{"amount":1}}`},
		{http.MethodPost, "/v1/sessions/r1/verify", `{"rollout_id":"r1","attempt":0,"request_id":"v","expected_revision":0}`},
		{http.MethodGet, "/nope", ""},
	}
	for _, auth := range []string{"", "Bearer " + testToken, "Bearer wrong", "Bearer " + testDataToken + "x", "bearer " + testDataToken, testDataToken} {
		for _, rt := range routes {
			status, code, challenge := rawCall(t, f.url, rt.method, rt.path, rt.body, auth)
			require.Equal(t, http.StatusUnauthorized, status, "%s %s with Authorization %q: %d %s (challenge %q), want 401 unauthorized", rt.method, rt.path, auth, status, code, challenge)
			require.Equal(t, protocol.CodeUnauthorized, code, "%s %s with Authorization %q: %d %s (challenge %q), want 401 unauthorized", rt.method, rt.path, auth, status, code, challenge)
			require.Contains(t, challenge, "turnstile-data", "%s %s with Authorization %q: %d %s (challenge %q), want 401 unauthorized", rt.method, rt.path, auth, status, code, challenge)
		}
	}
	after := f.stats(t)
	require.Equal(t, before, after, "unauthenticated requests changed the stats: %+v -> %+v", before, after)
	info := f.info(t, "r1")
	require.Equal(t, 0, info.Attempt, "unauthenticated requests changed the session: %+v", info)
	require.Equal(t, int64(0), info.Revision, "unauthenticated requests changed the session: %+v", info)
	// The health probe needs no token; the data token does not open the
	// control plane.
	status, _, _ := rawCall(t, f.url, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, status, "healthz without a token answered")
	status, code, _ := rawCall(t, f.url, http.MethodGet, "/v1/control/status", "", "Bearer "+testDataToken)
	require.Equal(t, http.StatusUnauthorized, status, "control status with the data token answered %d %s", status, code)
	require.Equal(t, protocol.CodeUnauthorized, code, "control status with the data token answered %d %s", status, code)
}

// TestDataPlaneNeverMovesTheFence: R7. A data-plane request from an attempt
// above the installed one is refused attempt_not_installed and changes
// nothing; an unseen rollout is not even remembered.
func TestDataPlaneNeverMovesTheFence(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.start(t, "live", 0, `{"target":9}`)
	f.operate(t, inc("live", 0, "live/t0/c0", 0, 2))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"start-over of a live rollout (the data-plane fence attack)", func() error {
			_, err := f.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("live", 9, "live/seed"), Env: counter.Name, Task: json.RawMessage(`{"target":1}`)})
			return err
		}},
		{"operate from a higher attempt", func() error { _, err := f.c.Operate(ctx, inc("live", 1, "live/t1/c0", 1, 1)); return err }},
		{"replay from a higher attempt", func() error { _, err := f.c.Operate(ctx, inc("live", 1, "live/t0/c0", 0, 2)); return err }},
		{"verify from a higher attempt", func() error {
			_, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("live", 2, "live/verify"), ExpectedRevision: 1})
			return err
		}},
		{"start of an unseen rollout at attempt 3", func() error {
			_, err := f.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("ghost", 3, "ghost/seed"), Env: counter.Name, Task: json.RawMessage(`{"target":1}`)})
			return err
		}},
		{"operate of an unseen rollout at attempt 1", func() error { _, err := f.c.Operate(ctx, inc("ghost", 1, "ghost/t0/c0", 0, 1)); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.stats(t)
			wantRemote(t, tc.call(), http.StatusConflict, protocol.CodeAttemptNotInstalled)
			after := f.stats(t)
			require.Equal(t, before.Applied, after.Applied, "stats %+v -> %+v", before, after)
			require.Equal(t, before.Replayed, after.Replayed, "stats %+v -> %+v", before, after)
			require.Equal(t, before.Sessions, after.Sessions, "stats %+v -> %+v", before, after)
			require.Equal(t, before.Refused+1, after.Refused, "stats %+v -> %+v", before, after)
		})
	}
	info := f.info(t, "live")
	require.Equal(t, 0, info.Attempt, "the live session changed: %+v", info)
	require.Equal(t, int64(1), info.Revision, "the live session changed: %+v", info)
	require.False(t, info.Retired, "the live session changed: %+v", info)
	// The real attempt 0 goes on; the unseen rollout was not remembered, so
	// its attempt 0 is still a new rollout, and authorising attempt 0 again
	// is a no-op.
	r := f.operate(t, inc("live", 0, "live/t1/c0", 1, 3))
	require.Equal(t, int64(2), r.Revision, "attempt 0 after the refusals = %+v", r)
	require.Equal(t, "counter=5", r.Outcome.Observation, "attempt 0 after the refusals = %+v", r)
	_, err := f.c.Session(ctx, "ghost")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	a, err := f.cc.Authorise(ctx, "ghost", 0)
	require.NoError(t, err, "authorise ghost 0 = %+v, %v", a, err)
	require.False(t, a.Changed, "authorise ghost 0 = %+v, %v", a, err)
	require.Equal(t, 0, a.Fence, "authorise ghost 0 = %+v, %v", a, err)
}

func TestAuthorise(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, counter.Name, "r", 0)
	f.operate(t, inc("r", 0, "r/t0/c0", 0, 1))

	a, err := f.cc.Authorise(ctx, "r", 2)
	want := (protocol.AuthoriseResponse{RolloutID: "r", Attempt: 2, Fence: 2, Changed: true, Dropped: true})
	require.NoError(t, err, "authorise r 2 = %+v, %v, want %+v", a, err, want)
	require.Equal(t, want, a, "authorise r 2 = %+v, %v, want %+v", a, err, want)
	st := f.stats(t)
	require.Equal(t, 0, st.Sessions, "the old session survived: %+v", st)
	// Idempotent: the same attempt again changes nothing.
	a, err = f.cc.Authorise(ctx, "r", 2)
	require.NoError(t, err, "authorise r 2 again = %+v, %v", a, err)
	require.False(t, a.Changed, "authorise r 2 again = %+v, %v", a, err)
	require.False(t, a.Dropped, "authorise r 2 again = %+v, %v", a, err)
	require.Equal(t, 2, a.Fence, "authorise r 2 again = %+v, %v", a, err)
	_, err = f.cc.Authorise(ctx, "r", 1)
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt, "below")
	// Attempt 2 starts over; attempts 0 and 1 are fenced out, 3 is not installed.
	f.startEnv(t, counter.Name, "r", 2)
	over := f.info(t, "r")
	require.Equal(t, 2, over.Attempt, "after the start-over: %+v", over)
	require.Equal(t, int64(0), over.Revision, "after the start-over: %+v", over)
	_, err = f.c.Operate(ctx, inc("r", 0, "r/t1/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Operate(ctx, inc("r", 3, "r/t1/c0", 0, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeAttemptNotInstalled)

	// A committed cut must not lose an execution: raising is refused, a
	// no-op is answered.
	f.prepare(t, "c1")
	_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: t.TempDir()})
	require.NoError(t, err, "commit")
	_, err = f.cc.Authorise(ctx, "r", 3)
	wantRemote(t, err, http.StatusConflict, protocol.CodeInvalidPhase, "committed")
	a, err = f.cc.Authorise(ctx, "r", 2)
	require.NoError(t, err, "no-op authorise while committed = %+v, %v", a, err)
	require.False(t, a.Changed, "no-op authorise while committed = %+v, %v", a, err)
	f.resume(t, "c1")

	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/control/sessions/r/authorise", `{"attempt":-1}`, http.StatusBadRequest, protocol.CodeMalformed},
		{"/v1/control/sessions/r/authorise", `{}`, http.StatusBadRequest, protocol.CodeMalformed},
		{"/v1/control/sessions/r/authorise", `{"attempt":1,"rollout_id":"r"}`, http.StatusBadRequest, protocol.CodeMalformed},
		{"/v1/control/sessions//authorise", `{"attempt":1}`, http.StatusNotFound, protocol.CodeNotFound},
	} {
		status, code, _ := rawCall(t, f.url, http.MethodPost, tc.path, tc.body, "Bearer "+testToken)
		require.Equal(t, tc.status, status, "POST %s %s answered %d %s, want %d %s", tc.path, tc.body, status, code, tc.status, tc.code)
		require.Equal(t, tc.code, code, "POST %s %s answered %d %s, want %d %s", tc.path, tc.body, status, code, tc.status, tc.code)
	}
	status, code, _ := rawCall(t, f.url, http.MethodPost, "/v1/control/sessions/r/authorise", `{"attempt":5}`, "Bearer "+testDataToken)
	require.Equal(t, http.StatusUnauthorized, status, "authorise with the data token answered %d %s", status, code)
	require.Equal(t, protocol.CodeUnauthorized, code, "authorise with the data token answered %d %s", status, code)
	info := f.info(t, "r")
	require.Equal(t, 2, info.Attempt, "refused authorisations changed the session: %+v", info)
}

// rawCall sends one request with the given Authorization header ("" for
// none) and returns the status, the error code and the challenge.
func rawCall(t *testing.T, base, method, path, body, authorization string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var eb protocol.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error.Code, resp.Header.Get("WWW-Authenticate")
}

// TestUnroutedRequests: the plane a request belongs to is decided on the
// path the router routes, so an escaped slash cannot make a data-plane
// request look like a control-plane one and skip the data token; a request
// without the token changes nothing (R1), and one with it that no route
// takes is a 404 counted under refused (R21).
func TestUnroutedRequests(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	before := f.stats(t)
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/v1%2Fcontrol/x", "", http.StatusUnauthorized},
		{"/v1%2Fcontrol%2Fstatus", "", http.StatusUnauthorized},
		{"/v1%2fcontrol/prepare", "Bearer " + testToken, http.StatusUnauthorized},
		{"/v1%2Fcontrol/x", "Bearer " + testDataToken, http.StatusNotFound},
		{"/nope", "Bearer " + testDataToken, http.StatusNotFound},
		{"/v1/sessions%2Fr1", "Bearer " + testDataToken, http.StatusNotFound},
	} {
		status, _, _ := rawCall(t, f.url, http.MethodGet, tc.path, "", tc.auth)
		if status != tc.status {
			t.Errorf("GET %s with Authorization %q: %d, want %d", tc.path, tc.auth, status, tc.status)
		}
	}
	after := f.stats(t)
	want := before
	want.Refused += 3 // the three authenticated 404s
	if after != want {
		t.Fatalf("requests the router does not route moved the stats %+v -> %+v, want %+v", before, after, want)
	}
	before = after
	// Routed requests are still counted.
	if status, _, _ := rawCall(t, f.url, http.MethodGet, "/v1/sessions/unknown", "", "Bearer "+testDataToken); status != http.StatusNotFound {
		t.Fatalf("unknown session answered %d", status)
	}
	if after := f.stats(t); after.Refused != before.Refused+1 {
		t.Fatalf("a refused routed request was not counted: %+v -> %+v", before, after)
	}
}
