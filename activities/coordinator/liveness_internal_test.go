package coordinator

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// hangable is a participant whose routes all stop answering while hung is
// set, and whose call route takes slow to answer when it does.
type hangable struct {
	hung    atomic.Bool
	slow    time.Duration
	release chan struct{}
}

func (h *hangable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.hung.Load() {
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	if r.URL.Path != "/healthz" {
		time.Sleep(h.slow)
	}
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func fastLiveness() Liveness {
	return Liveness{Every: 50 * time.Millisecond, Timeout: 50 * time.Millisecond, Misses: 3}
}

// TestWatchedGivesUpOnAHungParticipant: a call to a participant whose
// health route stops answering is given up after Misses probes, not when
// the call's own context ends; a slow call to a participant that answers
// its health route runs to its end.
func TestWatchedGivesUpOnAHungParticipant(t *testing.T) {
	h := &hangable{release: make(chan struct{}), slow: 400 * time.Millisecond}
	hs := testsupport.QuietServer(h)
	t.Cleanup(func() { close(h.release); hs.Close() })
	c := &Coordinator{Liveness: fastLiveness()}
	call := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/control/commit", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	require.NoError(t, c.watched(context.Background(), hs.URL, "commit", call), "slow, but its health route answers")

	h.hung.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := c.watched(ctx, hs.URL, "commit", call)
	require.True(t, isHung(err), "%v", err)
	require.Less(t, time.Since(start), 30*time.Second, "given up by the liveness bound, not the call's minute")
	fatal := hungFatal(err)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, fatal, &ae)
	require.Equal(t, checkpoint.ErrParticipantHung, ae.Type())
	require.True(t, ae.NonRetryable())
	require.Contains(t, fatal.Error(), "no answer to 3 health probes in a row")
}

// TestAbortAsksAHungParticipantAgain: the abort's resume of a participant
// that answers nothing is asked again, with the rollouts released, until
// it answers (a hang shorter than the window heals by itself), or the
// window passes (then the abort gives up for good, naming it).
func TestAbortAsksAHungParticipantAgain(t *testing.T) {
	h := &hangable{release: make(chan struct{})}
	hs := testsupport.QuietServer(h)
	t.Cleanup(func() { hs.Close() })
	c := &Coordinator{Liveness: fastLiveness(), AbortResumeWindow: time.Minute, Destinations: testsupport.LoopbackDestinations(t, "", "")}
	h.hung.Store(true)
	go func() {
		time.Sleep(3 * time.Second)
		h.hung.Store(false)
		close(h.release)
	}()
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	dead, errs := c.resumeEach(cctx, "ck", []string{hs.URL})
	cancel()
	require.Empty(t, dead, "a hung participant is not dead")
	require.Error(t, errs[0])
	left, err := c.resumeLeft(ctx, "ck", []string{hs.URL}, time.Now())
	require.NoError(t, err)
	require.Empty(t, left, "resumed once the hang was over")

	c.AbortResumeWindow = 2 * time.Second
	h2 := &hangable{release: make(chan struct{})}
	h2.hung.Store(true)
	hs2 := testsupport.QuietServer(h2)
	t.Cleanup(func() { close(h2.release); hs2.Close() })
	start := time.Now()
	left, err = c.resumeLeft(ctx, "ck", []string{hs2.URL}, start)
	require.Error(t, err)
	require.Equal(t, []string{hs2.URL}, left)
	require.Less(t, time.Since(start), time.Minute, "bounded by the window (and one call)")
}
