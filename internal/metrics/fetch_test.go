package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/metrics"
)

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != metrics.Path {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("go_goroutines 7\n"))
	}))
	defer srv.Close()
	b, err := metrics.Fetch(context.Background(), srv.URL+metrics.Path, time.Second)
	require.NoError(t, err)
	require.Equal(t, "go_goroutines 7\n", string(b))
	_, err = metrics.Fetch(context.Background(), srv.URL+"/other", time.Second)
	require.ErrorContains(t, err, "503", "a failed scrape names the status")
	require.ErrorContains(t, err, srv.URL+"/other")
}
