package storage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/storage"
)

// TestOpenerAllowSignsNothing: an object-store location naming an endpoint
// the operator did not configure is refused by the opener before any
// request is signed with the process's credentials. The same location
// through an opener without the check reaches the listener with the
// access key id in a SigV4 Authorization header, so the test can fail.
func TestOpenerAllowSignsNothing(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	defer evil.Close()
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIASTORAGETESTKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "storage-test-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()
	where := "s3://b/ck?endpoint=" + evil.URL + "&region=us-east-1&use_path_style=true"

	dest, err := destination.FromLookup(func(string) (string, bool) { return "", false },
		destination.Defaults{StoreLocations: []string{"s3://t/p?endpoint=http://127.0.0.1:7070&region=us-east-1"}})
	require.NoError(t, err)
	guarded := &storage.Opener{Allow: dest.Store}
	defer guarded.Close()
	_, err = guarded.Open(ctx, where)
	require.ErrorContains(t, err, destination.EnvAllowedStoreEndpoints)
	require.Empty(t, got(), "nothing was sent")
	local, err := guarded.Open(ctx, t.TempDir())
	require.NoError(t, err, "a local directory needs no admission")
	require.NotNil(t, local)

	open := &storage.Opener{}
	defer open.Close()
	st, err := open.Open(ctx, where)
	require.NoError(t, err)
	_, _ = st.Stat(ctx, "MANIFEST.json")
	require.NotEmpty(t, got(), "without the check the listener is reached")
	require.Contains(t, got()[0], "AKIASTORAGETESTKEY", "with the access key id")
}
