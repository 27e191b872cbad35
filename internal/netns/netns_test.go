package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/stack"
)

// TestPartition: a server in a namespace answers through the pair; a cut
// makes it hang (a timeout, not a refusal); a heal brings it back; and
// Close leaves no namespace, link or route behind.
func TestPartition(t *testing.T) {
	if err := Unsupported(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for a server in the namespace")
	}
	ctx := context.Background()
	n, err := New(ctx)
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			require.NoError(t, n.Close())
		}
	})
	l := &stack.Launcher{Dir: t.TempDir()}
	bin, args := n.Wrap("python3", []string{"-m", "http.server", "--bind", n.NsAddr, "18080"})
	p, err := l.Start("inside", bin, args)
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	url := fmt.Sprintf("http://%s:18080/", n.NsAddr)
	require.NoError(t, stack.WaitFor(ctx, "server in the namespace", p, 30*time.Second, func() bool { return stack.Reachable(url, time.Second) }))

	require.NoError(t, n.Cut(ctx))
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	_, err = c.Get(url)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a partition hangs, it refuses nothing: %v", err)

	require.NoError(t, n.Heal(ctx))
	require.NoError(t, stack.WaitFor(ctx, "server after the heal", p, 30*time.Second, func() bool { return stack.Reachable(url, time.Second) }))

	p.Kill()
	require.NoError(t, n.Close())
	closed = true
	requireGone(t, n)
}

// requireGone fails unless n's namespace, link and route are gone.
func requireGone(t *testing.T, n *Netns) {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NotContains(t, string(out), n.Name)
	out, _ = exec.Command("ip", "link").CombinedOutput()
	require.NotContains(t, string(out), n.HostIf+"@")
	out, _ = exec.Command("ip", "route").CombinedOutput()
	require.NotContains(t, string(out), subnetOf(n.slot))
}

// TestSweepLeftovers: what a killed run left (a namespace, pair and route
// named for a process that no longer runs) is removed by the next New,
// and a slot held by a live process is skipped, not shared.
func TestSweepLeftovers(t *testing.T) {
	if err := Unsupported(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	// A process that ran and is gone: its pid names the leftover.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	pid := dead.Process.Pid
	require.False(t, alive(pid), "pid %d was reused already; run again", pid)
	left := at(7)
	left.Name = fmt.Sprintf("%s%d-%d", namePrefix, pid, left.slot)
	require.NoError(t, left.create(ctx))
	t.Cleanup(func() { _ = left.Close() })

	mine, err := New(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mine.Close() })
	requireGone(t, left)

	// A slot this (live) process holds is taken: creating it again fails
	// as taken, and New picks another.
	again := at(mine.slot)
	err = again.create(ctx)
	require.Error(t, err)
	require.True(t, taken(err), "%v", err)
	other, err := New(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	require.NotEqual(t, mine.slot, other.slot)
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	require.Contains(t, string(out), mine.Name, "a live process's namespace stays")
}

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name      string
		pid, slot int
		ok        bool
	}{
		{"ts-123-45", 123, 45, true},
		{"ts-123-99999", 0, 0, false},
		{"ts-abc-1", 0, 0, false},
		{"other-1-2", 0, 0, false},
		{"ts-1", 0, 0, false},
	} {
		pid, slot, ok := parseName(c.name)
		require.Equal(t, c.ok, ok, c.name)
		if ok {
			require.Equal(t, []int{c.pid, c.slot}, []int{pid, slot}, c.name)
		}
	}
}
