package transcriptstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

func conversation() []transcript.Item {
	return []transcript.Item{
		{Role: "system", Content: "You control a counter."},
		{Role: "user", Content: "Increase the counter from 0 to 2."},
		{Role: "assistant", ToolCalls: []transcript.ToolCall{{ID: "c1", Name: "increment", Arguments: `{"amount":1}`}}},
		{Role: "tool", ToolCallID: "c1", Content: "counter=1"},
	}
}

func TestAppendLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head, err := s.AppendAll(ctx, "", conversation()...)
	require.NoError(t, err)
	require.NoError(t, head.Validate())

	got, err := s.Load(ctx, head)
	require.NoError(t, err)
	require.Equal(t, conversation(), got)

	empty, err := s.Load(ctx, "")
	require.NoError(t, err)
	require.Empty(t, empty)

	blobs, err := s.Blobs(ctx, head)
	require.NoError(t, err)
	require.Len(t, blobs, 2*len(conversation()), "one node and one item per message")
}

func TestEqualConversationsHaveEqualHeads(t *testing.T) {
	ctx := context.Background()
	a, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	b, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	ha, err := a.AppendAll(ctx, "", conversation()...)
	require.NoError(t, err)
	hb, err := b.AppendAll(ctx, "", conversation()...)
	require.NoError(t, err)
	require.Equal(t, ha, hb, "heads are content addresses, independent of the store")

	other := conversation()
	other[3].Content = "counter=2"
	hc, err := a.AppendAll(ctx, "", other...)
	require.NoError(t, err)
	require.NotEqual(t, ha, hc)
}

func TestCorruptBlobFailsClosed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := transcriptstore.Open(dir)
	require.NoError(t, err)
	head, err := s.AppendAll(ctx, "", conversation()...)
	require.NoError(t, err)

	hex := strings.TrimPrefix(string(head), "sha256:")
	path := filepath.Join(dir, hex[:2], hex)
	require.NoError(t, os.WriteFile(path, []byte(`{"item":"sha256:00"}`), 0o644))
	_, err = s.Load(ctx, head)
	require.ErrorIs(t, err, transcript.ErrCorrupt)
}

func TestMissingAndMalformedDigests(t *testing.T) {
	ctx := context.Background()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	missing := transcript.DigestOf([]byte("never stored"))
	_, err = s.Get(ctx, missing)
	require.ErrorIs(t, err, transcript.ErrNotFound)

	for _, bad := range []transcript.Digest{"sha256:xyz", "md5:00", transcript.Digest("sha256:" + strings.Repeat("A", 64)), "../etc/passwd"} {
		_, err := s.Get(ctx, bad)
		require.ErrorContains(t, err, "malformed digest", "%q", bad)
		_, err = s.Append(ctx, bad, transcript.Item{Role: "user"})
		require.Error(t, err, "append after %q", bad)
	}
	_, err = transcriptstore.Open("")
	require.Error(t, err)
}

func TestConcurrentWritersAgree(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var wg sync.WaitGroup
	heads := make([]transcript.Digest, 8)
	for i := range heads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := transcriptstore.Open(dir)
			require.NoError(t, err)
			heads[i], err = s.AppendAll(ctx, "", conversation()...)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	for _, h := range heads {
		require.Equal(t, heads[0], h)
	}
	tmp, err := filepath.Glob(filepath.Join(dir, "*", ".tmp-*"))
	require.NoError(t, err)
	require.Empty(t, tmp, "no temporary files left behind")
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	_, err = s.Put(ctx, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
}

// A rollout loads its conversation before every model call. Each load reads
// only the items appended since the previous one: the chain is not walked
// again (which made a rollout read O(turns²) files), and what it returns
// equals a fresh store's answer.
func TestLoadReadsOnlyNewItems(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := transcriptstore.Open(dir)
	require.NoError(t, err)
	var head transcript.Digest
	for turn := 0; turn < 50; turn++ {
		head, err = s.AppendAll(ctx, head,
			transcript.Item{Role: "assistant", Content: "call"},
			transcript.Item{Role: "tool", Content: strings.Repeat("x", turn)})
		require.NoError(t, err)
		before := s.Stats().Reads
		items, err := s.Load(ctx, head)
		require.NoError(t, err)
		require.Len(t, items, 2*(turn+1))
		reads := s.Stats().Reads - before
		require.EqualValues(t, 4, reads, "turn %d: only the two new nodes and items are read", turn)
		items[0].Content = "changed by the caller" // must not reach the cache
	}
	again, err := s.Load(ctx, head)
	require.NoError(t, err)
	fresh, err := transcriptstore.Open(dir)
	require.NoError(t, err)
	want, err := fresh.Load(ctx, head)
	require.NoError(t, err)
	require.Equal(t, want, again)
	require.EqualValues(t, 200, fresh.Stats().Reads, "a fresh store walks the whole chain once")
}
