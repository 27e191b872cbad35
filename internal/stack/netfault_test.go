package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNetnsPartition: a server in a namespace answers through the pair; a
// cut makes it hang (a timeout, not a refusal); a heal brings it back; and
// Close leaves no namespace, link or route behind.
func TestNetnsPartition(t *testing.T) {
	if err := NetnsUnsupported(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for a server in the namespace")
	}
	ctx := context.Background()
	n, err := NewNetns(ctx)
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			require.NoError(t, n.Close())
		}
	})
	l := &Launcher{Dir: t.TempDir()}
	bin, args := n.Wrap("python3", []string{"-m", "http.server", "--bind", n.NsAddr, "18080"})
	p, err := l.Start("inside", bin, args)
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	url := fmt.Sprintf("http://%s:18080/", n.NsAddr)
	require.NoError(t, WaitFor(ctx, "server in the namespace", p, 30*time.Second, func() bool { return Reachable(url, time.Second) }))

	require.NoError(t, n.Cut(ctx))
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	_, err = c.Get(url)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a partition hangs, it refuses nothing: %v", err)

	require.NoError(t, n.Heal(ctx))
	require.NoError(t, WaitFor(ctx, "server after the heal", p, 30*time.Second, func() bool { return Reachable(url, time.Second) }))

	p.Kill()
	require.NoError(t, n.Close())
	closed = true
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NotContains(t, string(out), n.Name)
	out, _ = exec.Command("ip", "link").CombinedOutput()
	require.NotContains(t, string(out), n.HostIf)
	out, _ = exec.Command("ip", "route").CombinedOutput()
	require.NotContains(t, string(out), n.subnet)
}

// TestToxiproxyHang: a proxy passes requests; hung, it answers nothing and
// closes nothing; healed, it passes them again.
func TestToxiproxyHang(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin, err := FindToxiproxy(root)
	if err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	l := &Launcher{Dir: t.TempDir()}
	tp, err := l.StartToxiproxy(ctx, bin, 30*time.Second)
	require.NoError(t, err)
	t.Cleanup(tp.Proc.Kill)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(up.Close)
	px, err := tp.Front("up", up.URL)
	require.NoError(t, err)
	require.True(t, Reachable(px.URL+"/", 2*time.Second))
	require.NoError(t, px.Hang())
	require.False(t, Reachable(px.URL+"/", time.Second), "hung")
	require.NoError(t, px.Heal())
	require.True(t, Reachable(px.URL+"/", 2*time.Second), "healed")
}
