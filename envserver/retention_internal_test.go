package envserver

import (
	"testing"
	"time"
)

// An idle store lets go of retired sessions too: the sweep timer evicts
// them when their grace ends, with no request arriving to trigger it.
func TestIdleStoreSweepsRetiredSessions(t *testing.T) {
	st := newSessionStore(0, 20*time.Millisecond, nil)
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
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d retired sessions kept, %d evicted, sweep pending %v; want 0, 2, false", kept, evicted, pending)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
