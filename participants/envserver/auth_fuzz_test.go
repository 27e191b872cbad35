package envserver_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// FuzzAuthenticated sends any Authorization header, rollout id and body to
// any route of a server that holds one live session, and checks RULES.md R1
// and R2 and "no 5xx, no change on refusal": a request without its plane's
// token is answered 401 unauthorized and changes nothing at all (not even
// the refused counter); with the token, a refusal is a JSON envelope with a
// known code and changes nothing but that counter. A probe increment then
// proves the live session went on from exactly where it was.
func FuzzAuthenticated(f *testing.F) {
	attack := `{"rollout_id":"live","attempt":9,"request_id":"live/seed","env":"counter","seed":1,"task":{"target":1}}`
	bodies := map[string]string{
		protocol.RouteStart:            attack,
		protocol.RouteOperate:          `{"rollout_id":"live","attempt":9,"request_id":"live/t1/c0","expected_revision":1,"tool":"increment","arguments":{"amount":1}}`,
		protocol.RouteVerify:           `{"rollout_id":"live","attempt":1,"request_id":"live/verify","expected_revision":1}`,
		protocol.RouteControlAuthorise: `{"attempt":9}`,
		protocol.RouteControlRetire:    `{"rollout_id":"live","attempt":1}`,
		protocol.RouteControlPrepare:   `{"checkpoint_id":"k","deadline":"2999-01-01T00:00:00Z"}`,
	}
	auths := []string{"", "Bearer " + fuzzDataToken, "Bearer " + fuzzControlToken, "Bearer wrong", "bearer " + fuzzDataToken,
		"Bearer " + fuzzDataToken + " ", "Bearer", "Basic ZnV6ejp0b2tlbg==", "Bearer " + fuzzDataToken[:len(fuzzDataToken)-1]}
	for i, route := range fuzzRoutes {
		for _, a := range auths {
			f.Add(uint8(i), a, fuzzLive, []byte(bodies[route]))
		}
	}
	f.Add(uint8(0), "Bearer "+fuzzDataToken, "x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, route uint8, authorization, rollout string, body []byte) {
		fuzzAuthenticated(t, fuzzRoutes[int(route)%len(fuzzRoutes)], authorization, rollout, body)
	})
}

// fuzzRoutes are every route the server registers.
var fuzzRoutes = []string{
	protocol.RouteHealth, protocol.RouteEnvs, protocol.RouteStats, protocol.RouteStart, protocol.RouteOperate,
	protocol.RouteVerify, protocol.RouteSessions,
	protocol.RouteControlCapabilities, protocol.RouteControlStatus, protocol.RouteControlPrepare, protocol.RouteControlCommit,
	protocol.RouteControlRestore, protocol.RouteControlResume, protocol.RouteControlRetire, protocol.RouteControlAuthorise,
}

// fuzzControlCodes are the codes a control-plane refusal may name.
var fuzzControlCodes = []string{
	protocol.CodeMalformed, protocol.CodeUnauthorized, protocol.CodeNotFound, protocol.CodeCheckpointConflict,
	protocol.CodeStaleCheckpoint, protocol.CodeInvalidPhase, protocol.CodePrepareTimeout, protocol.CodePrepareAborted,
	protocol.CodeInvalidCheckpoint, protocol.CodeLocationConflict, protocol.CodeStaleAttempt,
}

func fuzzAuthenticated(t *testing.T, route, authorization, rollout string, body []byte) {
	method, _, _ := strings.Cut(route, " ")
	control := strings.HasPrefix(routePath(route), protocol.ControlPrefix)
	token, realm := fuzzDataToken, "turnstile-data"
	if control {
		token, realm = fuzzControlToken, "turnstile-control"
	}
	srv := newFuzzServer(t)
	before := fuzzSnapshot(t, srv)
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, fuzzRequestAuth(method, route, rollout, body, authorization))
	status, answer := w.Code, w.Body.Bytes()
	after := fuzzSnapshot(t, srv)

	switch {
	case status >= 500:
		require.Failf(t, "a 5xx answer", "%s answered %d %s, want no 5xx", route, status, answer)
	case status >= 300 && status < 400:
		return // ServeMux cleaning a path: nothing reached a handler
	case route == protocol.RouteHealth:
		return
	case authorization != "Bearer "+token:
		require.Equal(t, http.StatusUnauthorized, status, "%s with Authorization %q answered %d %s (WWW-Authenticate %q), want 401 unauthorized", route, authorization, status, answer, w.Header().Get("WWW-Authenticate"))
		require.Equal(t, protocol.CodeUnauthorized, fuzzCode(t, answer), "%s with Authorization %q answered %d %s (WWW-Authenticate %q), want 401 unauthorized", route, authorization, status, answer, w.Header().Get("WWW-Authenticate"))
		require.Contains(t, w.Header().Get("WWW-Authenticate"), realm, "%s with Authorization %q answered %d %s (WWW-Authenticate %q), want 401 unauthorized", route, authorization, status, answer, w.Header().Get("WWW-Authenticate"))
		require.Equal(t, before, after, "an unauthenticated %s changed the server from %+v to %+v", route, before, after)
		fuzzProbe(t, srv)
		return
	case status == http.StatusOK:
		return // authenticated and accepted: FuzzOperate/FuzzStart and the property test check what it did
	}
	codes := fuzzCodes
	if control {
		codes = fuzzControlCodes
	}
	code := fuzzCode(t, answer)
	require.True(t, slices.Contains(codes, code), "%s answered %d with code %q, want one of %v", route, status, code, codes)
	before.stats.Refused, after.stats.Refused = 0, 0
	require.Equal(t, before, after, "%s answered %d %s, yet the server changed from %+v to %+v", route, status, answer, before, after)
	fuzzProbe(t, srv)
}

// fuzzCode decodes an error envelope strictly and returns its code.
func fuzzCode(t *testing.T, answer []byte) string {
	t.Helper()
	var eb protocol.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&eb), "answer %q is not an error envelope", answer)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "answer %q: trailing data after the error envelope", answer)
	require.NotEqual(t, "", eb.Error.Message, "answer %q names no problem", answer)
	return eb.Error.Code
}
