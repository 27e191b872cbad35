package envserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// The fuzz targets post arbitrary bytes (and, for operate and verify,
// arbitrary rollout ids in the path) to the data plane of a server holding
// one live counter session, and check that the server never panics, never
// answers 5xx, and answers every 4xx with a JSON error envelope naming a
// known code and changes nothing: the counters, the live session and its
// environment state are as before, which a probe increment then proves.
//
// Each input gets a fresh server, served in process (ServeHTTP), so a panic
// reaches the fuzzer instead of net/http's recovery, and inputs do not
// depend on each other.

// The live session every input finds: rollout fuzzLive at attempt 1
// (installed through the control plane), started with fuzzTask and
// incremented once by 1 (request fuzzFirstOp), so it is at revision 1 and
// the counter shows 3.
const (
	fuzzLive    = "live"
	fuzzAttempt = 1
	fuzzTask    = `{"target":9,"start":2}`
	fuzzFirstOp = "live/t0/c0"

	fuzzDataToken    = "fuzz-data-token"
	fuzzControlToken = "fuzz-control-token"
)

// fuzzCodes are the codes a data-plane 4xx may name.
var fuzzCodes = []string{
	protocol.CodeMalformed, protocol.CodeUnknownEnv, protocol.CodeUnknownSession,
	protocol.CodeSessionRetired, protocol.CodeRevisionMismatch, protocol.CodeRequestConflict,
	protocol.CodeStaleAttempt, protocol.CodeAttemptNotInstalled, protocol.CodeNotFound,
	envs.CodeUnknownTool, envs.CodeBadArguments, envs.CodeIllegalAction, envs.CodeBadTask,
	envs.CodeBadState, envs.CodeNotExportable, envs.CodeEpisodeOver,
}

func FuzzOperate(f *testing.F) {
	op := func(fields string) []byte {
		return []byte(`{"rollout_id":"live","attempt":1,"request_id":"live/t1/c0",` + fields + `}`)
	}
	for _, s := range []struct {
		rollout string
		verify  bool
		body    string
	}{
		// Valid: a new increment, the replay of the applied one, a verify.
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`))},
		{fuzzLive, false, `{"rollout_id":"live","attempt":1,"request_id":"live/t0/c0","expected_revision":0,"tool":"increment","arguments":{"amount":1}}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":2,"request_id":"live/t0/c0","expected_revision":0,"tool":"increment","arguments":{ "amount" : 1 }}`},
		{fuzzLive, true, `{"rollout_id":"live","attempt":1,"request_id":"live/verify","expected_revision":1}`},
		// Near valid.
		{fuzzLive, false, `{"rollout_id":"live","attempt":1,"request_id":"live/t0/c0","expected_revision":0,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, string(op(`"expected_revision":0,"tool":"increment","arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":11}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2,"x":1}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":"amount"`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":null`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment"`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"decrement","arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"","arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2},"extra":true`))},
		{fuzzLive, false, string(op(`"expected_revision":1.5,"tool":"increment","arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":null,"tool":"increment","arguments":{"amount":2}`))},
		{fuzzLive, false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`)) + `{}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":0,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":-1,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":9223372036854775807,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":1e30,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"live","request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"live","attempt":1,"request_id":"","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, `{"rollout_id":"other","attempt":1,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":2}}`},
		{fuzzLive, false, "{\"rollout_id\":\"live\xff\",\"attempt\":1,\"request_id\":\"x\",\"expected_revision\":1,\"tool\":\"increment\"}"},
		{fuzzLive, true, `{"rollout_id":"live","attempt":1,"request_id":"live/verify","expected_revision":0}`},
		{fuzzLive, true, `{"rollout_id":"live","attempt":1,"request_id":"live/t0/c0","expected_revision":1}`},
		{fuzzLive, true, `{"rollout_id":"live","attempt":1,"request_id":"live/verify"}`},
		{fuzzLive, false, `null`},
		{fuzzLive, false, `[]`},
		{fuzzLive, false, `{`},
		{fuzzLive, false, ``},
		{fuzzLive, false, `"live"`},
		// Other rollout ids in the path.
		{"nope", false, `{"rollout_id":"nope","attempt":0,"request_id":"nope/t0/c0","expected_revision":0,"tool":"increment","arguments":{"amount":1}}`},
		{"", false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`))},
		{"..", false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`))},
		{"a/b", true, `{"rollout_id":"a/b","attempt":0,"request_id":"a/b/verify","expected_revision":0}`},
		{"live/../live", false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`))},
		{"l%69ve", false, string(op(`"expected_revision":1,"tool":"increment","arguments":{"amount":2}`))},
	} {
		f.Add(s.rollout, s.verify, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, rollout string, verify bool, body []byte) {
		route := protocol.RouteOperate
		if verify {
			route = protocol.RouteVerify
		}
		fuzzMutation(t, route, rollout, body)
	})
}

func FuzzStart(f *testing.F) {
	for _, body := range []string{
		// Valid: a new rollout, the replay of the live start, a start-over.
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":7,"task":{"target":4}}`,
		`{"rollout_id":"live","attempt":1,"request_id":"live/seed","env":"counter","seed":1,"task":{"start":2,"target":9}}`,
		`{"rollout_id":"live","attempt":2,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":9,"start":2}}`,
		`{"rollout_id":"live","attempt":3,"request_id":"live/seed/3","env":"counter","seed":1,"task":{"target":1,"padding":8}}`,
		// Near valid.
		`{"rollout_id":"live","attempt":1,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":8}}`,
		`{"rollout_id":"live","attempt":1,"request_id":"live/seed2","env":"counter","seed":1,"task":{"target":9,"start":2}}`,
		`{"rollout_id":"live","attempt":0,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":9,"start":2}}`,
		`{"rollout_id":"live","attempt":2,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":-1}}`,
		`{"rollout_id":"live","attempt":2,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":9,"padding":99999999}}`,
		`{"rollout_id":"live","attempt":2,"request_id":"live/seed","env":"nope","seed":1,"task":{"target":9}}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9,"x":1}}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":null}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":"1","task":{"target":9}}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","seed":1,"task":{"target":9}}`,
		`{"rollout_id":"new","request_id":"new/seed","env":"counter","seed":1,"task":{"target":9}}`,
		`{"rollout_id":"","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9}}`,
		`{"rollout_id":"new","attempt":-3,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9}}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9},"extra":1}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9}} x`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":9`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":[1,2]}`,
		`{"rollout_id":"new","attempt":0,"request_id":"new/seed","env":"counter","seed":1,"task":{"target":1e400}}`,
		`null`, `{}`, `[]`, ``, `0`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzMutation(t, protocol.RouteStart, fuzzLive, body)
	})
}

// fuzzMutation posts body to route (with rollout in the path where the
// route has one) on a fresh server and checks the answer.
func fuzzMutation(t *testing.T, route, rollout string, body []byte) {
	srv := newFuzzServer(t)
	before := fuzzSnapshot(t, srv)

	w := httptest.NewRecorder()
	srv.ServeHTTP(w, fuzzRequest(http.MethodPost, route, rollout, body))
	status, answer := w.Code, w.Body.Bytes()
	after := fuzzSnapshot(t, srv)

	switch {
	case status >= 500:
		require.Failf(t, "a 5xx answer", "answered %d %s, want no 5xx", status, answer)
	case status == http.StatusOK:
		require.True(t, json.Valid(answer), "answered 200 with invalid JSON %q", answer)
		// A success is one application or one replay, nothing else.
		require.Equal(t, int64(1), (after.stats.Applied-before.stats.Applied)+(after.stats.Replayed-before.stats.Replayed), "answered 200 %s: stats went from %+v to %+v, want one application or one replay", answer, before.stats, after.stats)
		return
	case status >= 300 && status < 400:
		// ServeMux redirects a path it would clean (an empty, "." or ".."
		// segment); nothing reached a handler.
		p := strings.Replace(routePath(route), "{rollout_id}", rollout, 1)
		require.NotEqual(t, p, path.Clean(p), "answered %d for the clean path %q", status, p)
	case status >= 400:
		fuzzWantEnvelope(t, status, w.Header(), answer)
	default:
		require.Failf(t, "an unexpected answer", "answered %d %s", status, answer)
	}

	// Not applied: nothing changed, and the live session goes on from
	// exactly where it was.
	before.stats.Refused, after.stats.Refused = 0, 0
	require.Equal(t, before, after, "answered %d %s, yet the server changed from %+v to %+v", status, answer, before, after)
	fuzzProbe(t, srv)
}

func fuzzWantEnvelope(t *testing.T, status int, h http.Header, answer []byte) {
	t.Helper()
	ct := h.Get("Content-Type")
	require.Equal(t, "application/json", ct, "answered %d with content type %q, want application/json", status, ct)
	var eb protocol.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&eb), "answered %d %q: not an error envelope", status, answer)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "answered %d %q: trailing data after the error envelope", status, answer)
	require.True(t, slices.Contains(fuzzCodes, eb.Error.Code), "answered %d with code %q and message %q, want a known code and a message", status, eb.Error.Code, eb.Error.Message)
	require.NotEqual(t, "", eb.Error.Message, "answered %d with code %q and message %q, want a known code and a message", status, eb.Error.Code, eb.Error.Message)
}

// fuzzState is what a refused request must leave as it was.
type fuzzState struct {
	stats   protocol.Stats
	status  int
	info    protocol.SessionInfo
	control protocol.ControlStatus
}

func fuzzSnapshot(t *testing.T, srv *envserver.Server) fuzzState {
	t.Helper()
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, fuzzRequest(http.MethodGet, protocol.RouteSessions, fuzzLive, nil))
	st := fuzzState{stats: srv.Stats(), status: w.Code, control: fuzzControlStatus(t, srv)}
	if w.Code == http.StatusOK {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &st.info), "session %s: decode %s", fuzzLive, w.Body.Bytes())
	}
	return st
}

// newFuzzServer returns a server whose live session is at revision 1 with
// the counter at 3.
func newFuzzServer(t *testing.T) *envserver.Server {
	t.Helper()
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()},
		DataToken: fuzzDataToken, ControlToken: fuzzControlToken})
	require.NoError(t, err, "NewServer")
	fuzzMust(t, srv, "setup authorise", protocol.RouteControlAuthorise, protocol.AuthoriseRequest{Attempt: fuzzAttempt}, nil)
	fuzzMust(t, srv, "setup start", protocol.RouteStart, protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: fuzzLive, Attempt: fuzzAttempt, RequestID: protocol.SeedRequestID(fuzzLive)},
		Env:      counter.Name, Seed: 1, Task: json.RawMessage(fuzzTask),
	}, nil)
	var resp protocol.OperateResponse
	fuzzMust(t, srv, "setup operate", protocol.RouteOperate, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: fuzzLive, Attempt: fuzzAttempt, RequestID: fuzzFirstOp},
		ExpectedRevision: 0, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`),
	}, &resp)
	require.Equal(t, int64(1), resp.Revision, "setup operate answered %+v", resp)
	require.Equal(t, "counter=3", resp.Outcome.Observation, "setup operate answered %+v", resp)
	return srv
}

// fuzzProbe increments the live session by 1: it must still be at revision
// 1 with the counter at 3, at attempt 1.
func fuzzProbe(t *testing.T, srv *envserver.Server) {
	t.Helper()
	var resp protocol.OperateResponse
	fuzzMust(t, srv, "probe increment after a refused request", protocol.RouteOperate, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: fuzzLive, Attempt: fuzzAttempt, RequestID: "live/probe"},
		ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`),
	}, &resp)
	require.Equal(t, int64(2), resp.Revision, "probe increment answered %+v, want revision 2 and counter=4: the refused request changed the session", resp)
	require.Equal(t, "counter=4", resp.Outcome.Observation, "probe increment answered %+v, want revision 2 and counter=4: the refused request changed the session", resp)
	require.False(t, resp.Replayed, "probe increment answered %+v, want revision 2 and counter=4: the refused request changed the session", resp)
}

// fuzzMust sends a request that must succeed and decodes its answer.
func fuzzMust(t *testing.T, srv *envserver.Server, what, route string, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err, "encode")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, fuzzRequest(http.MethodPost, route, fuzzLive, b))
	require.Equal(t, http.StatusOK, w.Code, "%s answered %d %s", what, w.Code, w.Body.Bytes())
	if out != nil {
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), out), "%s: decode %s", what, w.Body.Bytes())
	}
}

// fuzzRequest builds a request for route with rollout (any bytes) escaped
// into its path, carrying the token of the route's plane.
func fuzzRequest(method, route, rollout string, body []byte) *http.Request {
	tok := fuzzDataToken
	if strings.HasPrefix(routePath(route), protocol.ControlPrefix) {
		tok = fuzzControlToken
	}
	return fuzzRequestAuth(method, route, rollout, body, "Bearer "+tok)
}

// fuzzRequestAuth is fuzzRequest with authorization as the Authorization
// header ("" sends none).
func fuzzRequestAuth(method, route, rollout string, body []byte, authorization string) *http.Request {
	p := routePath(route)
	r := httptest.NewRequest(method, "/", bytes.NewReader(body))
	r.URL.Path = strings.Replace(p, "{rollout_id}", rollout, 1)
	r.URL.RawPath = strings.Replace(p, "{rollout_id}", url.PathEscape(rollout), 1)
	r.RequestURI = r.URL.RequestURI()
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	return r
}

// fuzzControlStatus reads the control plane's status.
func fuzzControlStatus(t *testing.T, srv *envserver.Server) protocol.ControlStatus {
	t.Helper()
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, fuzzRequest(http.MethodGet, protocol.RouteControlStatus, "", nil))
	var st protocol.ControlStatus
	require.Equal(t, http.StatusOK, w.Code, "control status answered %d %s", w.Code, w.Body.Bytes())
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &st), "control status answered %d %s", w.Code, w.Body.Bytes())
	st.InFlight = nil // nothing runs between two snapshots; nil and [] alike
	return st
}
