package stack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
