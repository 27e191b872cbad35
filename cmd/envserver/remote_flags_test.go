package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestRemoteFlag: --remote hosts an HTTP environment next to (or instead
// of) the catalog's; a bad spec or an unreachable remote stops the start.
func TestRemoteFlag(t *testing.T) {
	gym := httptest.NewServer(http.NotFoundHandler()) // declares nothing: restart-only
	t.Cleanup(gym.Close)
	base := startRun(t, "--remote", "name=walk,url="+gym.URL+",kind=gymnasium")
	var specs []envs.Spec
	require.NoError(t, protocol.NewDataClient(base, testDataToken, nil).Do(context.Background(), http.MethodGet, "/v1/envs", nil, &specs))
	got := map[string]envs.Spec{}
	for _, s := range specs {
		got[s.Name] = s
	}
	b, _ := json.Marshal(specs)
	w, ok := got["walk"]
	require.True(t, ok, "/v1/envs = %s, want counter and walk (gym, restart_only)", b)
	require.Equal(t, envs.ModeRestartOnly, w.Mode, "/v1/envs = %s, want counter and walk (gym, restart_only)", b)
	require.Equal(t, envs.StyleGym, w.Style, "/v1/envs = %s, want counter and walk (gym, restart_only)", b)
	require.NotEmpty(t, got["counter"].Name, "/v1/envs = %s, want counter and walk (gym, restart_only)", b)

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, tt := range []struct{ spec, want string }{
		{"name=walk,kind=gymnasium", "not an http(s) URL"},
		{"name=walk,url=" + down.URL + ",kind=gymnasium", "cannot reach"},
	} {
		err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--envs", "", "--data-token", testDataToken, "--remote", tt.spec}, io.Discard)
		assert.ErrorContains(t, err, tt.want, "--remote %s: error %v, want %q", tt.spec, err, tt.want)
	}
}
