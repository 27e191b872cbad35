package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
)

// serveWithWriteTimeout serves s over HTTP with a write timeout far
// shorter than what the test's long poll or stream takes.
func serveWithWriteTimeout(t *testing.T, s *Server, d time.Duration) *httptest.Server {
	t.Helper()
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Config.WriteTimeout = d
	hs.Start()
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, hs *httptest.Server, target string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", hs.URL+target, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := hs.Client().Do(req)
	require.NoError(t, err, "GET %s", target)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "GET %s: body", target)
	return resp, body
}

// A long poll waits longer than the write timeout and still answers: the
// feed moves its write deadline to the end of its wait.
func TestFeedLongPollOutlastsTheWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	f := &fakeBackend{runs: 1,
		health: func(trainer.HealthRequest) (trainer.Health, error) {
			return trainer.Health{State: trainer.HealthOK, Rollouts: 1, Running: 1}, nil
		},
		feed: func(trainer.FeedRequest) (trainer.FeedPage, error) { return trainer.FeedPage{}, nil }}
	s := newTestServer(t, f, func(c *Config) {
		c.WriteTimeout = writeTimeout
		c.PollInterval = 50 * time.Millisecond
	})
	hs := serveWithWriteTimeout(t, s, writeTimeout)
	resp, body := get(t, hs, feedURL("s1", url.Values{"wait_ms": {"1500"}}))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var fr FeedResponse
	require.NoError(t, json.Unmarshal(body, &fr))
	require.Empty(t, fr.Items)
}

// An export that takes longer than the write timeout, but makes progress
// within it, is not cut off.
func TestExportOutlastsTheWriteTimeout(t *testing.T) {
	const writeTimeout = 400 * time.Millisecond
	f := &fakeBackend{runs: 1, export: func(_ string, w io.Writer) error {
		for i := range 8 {
			if _, err := fmt.Fprintf(w, "{\"line\":%d}\n", i); err != nil {
				return err
			}
			time.Sleep(writeTimeout / 3) // a slow store; 8 lines take 2.7 write timeouts
		}
		return nil
	}}
	s := newTestServer(t, f, func(c *Config) { c.WriteTimeout = writeTimeout })
	hs := serveWithWriteTimeout(t, s, writeTimeout)
	resp, body := get(t, hs, "/v1/sets/s1/export")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, 8, strings.Count(string(body), "\n"))
}
