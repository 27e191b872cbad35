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

// Retired sessions installed from a checkpoint, in any order, take their
// place in the LRU by when they were last used, so the grace expires the
// oldest first and spares the newer ones; a session whose grace already
// ended is dropped as it arrives.
func TestInstalledRetiredSessionsKeepTheirOrder(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	st := newSessionStore(0, 10*time.Minute, -1, func() time.Time { return now })
	for _, c := range []struct {
		id  string
		age time.Duration
	}{{"b", 4 * time.Minute}, {"d", time.Minute}, {"a", 11 * time.Minute}, {"c", 2 * time.Minute}} {
		sl := st.slotFor(c.id)
		sl.mu.Lock()
		st.install(sl, &session{Env: "counter", Retired: true, Receipts: map[string]receipt{}, idleSince: now.Add(-c.age)})
		sl.mu.Unlock()
	}
	kept := func() []string {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.expireLocked()
		var ids []string
		for el := st.retiredLRU.Front(); el != nil; el = el.Next() {
			ids = append(ids, el.Value.(*retiredEntry).id)
		}
		return ids
	}
	require.Equal(t, []string{"d", "c", "b"}, kept(), "most recently used first; a, past its grace, dropped")
	now = now.Add(8*time.Minute + 30*time.Second)
	require.Equal(t, []string{"d"}, kept(), "b and c are past their grace")
}
