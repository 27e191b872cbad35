package coordinator_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestProbeParticipants: a server that answers its health route (any
// status, slowly but within the timeout) is alive; one that hangs past
// the timeout or refuses connections is not; the set's running rollouts
// are counted by visibility.
func TestProbeParticipants(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer ok.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { time.Sleep(100 * time.Millisecond) }))
	defer slow.Close()
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	var query string
	c := &coordinator.Coordinator{Client: &temporalfake.Client{Count: func(q string) (int64, error) { query = q; return 5, nil }}}
	res, err := c.ProbeParticipants(context.Background(), checkpoint.ProbeParticipantsInput{
		Set: "s1", Servers: []string{ok.URL, slow.URL, hung.URL, refused}, Timeout: "1s"})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false, false}, res.Answered)
	require.Equal(t, 5, res.Running)
	require.True(t, strings.Contains(query, `ExecutionStatus = "Running"`) && strings.Contains(query, `"s1"`), query)

	_, err = c.ProbeParticipants(context.Background(), checkpoint.ProbeParticipantsInput{Set: "s1", Servers: []string{ok.URL}, Timeout: "soon"})
	require.ErrorContains(t, err, "timeout")
}
