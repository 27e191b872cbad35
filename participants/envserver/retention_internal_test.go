package envserver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
)

// An idle store lets go of retired sessions too: the sweep timer evicts
// them when their grace ends, with no request arriving to trigger it.
func TestIdleStoreSweepsRetiredSessions(t *testing.T) {
	st := newSessionStore(0, 20*time.Millisecond, -1, nil)
	for _, id := range []string{"a", "b"} {
		sl := st.slotFor(id)
		sl.mu.Lock()
		st.install(sl, &session{Env: "counter", Retired: true, Receipts: map[string]receipt{}})
		sl.mu.Unlock()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		kept, evicted, pending := st.retiredLRU.Len(), len(st.evictedInfo), st.sweep != nil
		st.mu.Unlock()
		if kept == 0 && evicted == 2 && !pending {
			return
		}
		require.False(t, time.Now().After(deadline), "after 10 s: %d retired sessions kept, %d evicted, sweep pending %v; want 0, 2, false", kept, evicted, pending)
		time.Sleep(5 * time.Millisecond)
	}
}

// A checkpoint export reads retired sessions without using them: a server
// checkpointed more often than the grace still drops them when it ends.
func TestExportDoesNotKeepRetiredSessions(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s, err := NewServer(ServerConfig{Envs: []envs.Environment{counter.New()}, InsecureNoDataAuth: true,
		RetiredGrace: time.Minute, Now: func() time.Time { return now }})
	require.NoError(t, err)
	sl := s.store.slotFor("a")
	sl.mu.Lock()
	s.store.install(sl, &session{Env: counter.Name, Retired: true, Receipts: map[string]receipt{}})
	sl.mu.Unlock()
	exported := func() int {
		t.Helper()
		st, err := s.exportState()
		require.NoError(t, err)
		return len(st.Sessions)
	}
	for range 2 {
		now = now.Add(20 * time.Second)
		n := exported()
		require.Equal(t, 1, n, "at %s: %d sessions exported; want the retired one", now, n)
	}
	now = now.Add(25 * time.Second) // 65 s since its retirement, 25 s since the last export
	n := exported()
	require.Equal(t, 0, n, "%d sessions exported after the grace; want none (exports must not keep them)", n)
}
