package transcriptstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// TestSweepConcurrentWriters sweeps a store while a writer keeps putting
// new blobs and putting referenced ones again: nothing referenced or
// written during the sweep is deleted, every old unreferenced blob is, and
// the byte counts are those of the blobs.
func TestSweepConcurrentWriters(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		s, err := transcriptstore.Open(t.TempDir())
		require.NoError(t, err)
		testSweepConcurrentWriters(t, s)
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		srv.SetEnv(t)
		var o storage.Opener
		t.Cleanup(func() { o.Close() })
		s, err := transcriptstore.OpenLocation(context.Background(), &o, srv.Bucket(t, "transcripts", "blobs"))
		require.NoError(t, err)
		testSweepConcurrentWriters(t, s)
	})
}

func testSweepConcurrentWriters(t *testing.T, s *transcriptstore.Store) {
	ctx := context.Background()
	put := func(prefix string, n int) (map[transcript.Digest]int64, []string) {
		out := map[transcript.Digest]int64{}
		var contents []string
		for i := range n {
			c := fmt.Sprintf("%s blob %d %s", prefix, i, strings.Repeat("x", i))
			d, err := s.Put(ctx, []byte(c))
			require.NoError(t, err)
			out[d] = int64(len(c))
			contents = append(contents, c)
		}
		return out, contents
	}
	garbage, _ := put("unreferenced", 20)
	live, liveContents := put("referenced", 10)

	// The old blobs must be older than the cutoff by the store's clock.
	newest := time.Time{}
	for d := range mergeDigests(garbage, live) {
		newest = latest(newest, modTime(t, s, d))
	}
	require.Eventually(t, func() bool {
		return transcriptstore.SweepCutoff(time.Now(), 0).After(newest)
	}, 10*time.Second, 20*time.Millisecond)

	markStart := time.Now()
	stop := make(chan struct{})
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		written []transcript.Digest
		werr    error
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d, err := s.Put(ctx, fmt.Appendf(nil, "written during the sweep %d", i))
			if err == nil {
				_, err = s.Put(ctx, []byte(liveContents[i%len(liveContents)]))
			}
			mu.Lock()
			if err != nil {
				werr = err
				mu.Unlock()
				return
			}
			written = append(written, d)
			mu.Unlock()
		}
	})
	// The mark has begun and the writer is under way: blobs it wrote since
	// are unreferenced and must survive, like those it writes meanwhile.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(written) >= 5 || werr != nil
	}, 10*time.Second, time.Millisecond)
	res, err := s.Sweep(ctx, func(d transcript.Digest) bool { _, ok := live[d]; return ok },
		transcriptstore.SweepCutoff(markStart, 0))
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.NoError(t, werr)

	var garbageBytes, liveBytes int64
	for _, n := range garbage {
		garbageBytes += n
	}
	for _, n := range live {
		liveBytes += n
	}
	require.Equal(t, len(garbage), res.FreedBlobs, "every old unreferenced blob is freed: %+v", res)
	require.Equal(t, garbageBytes, res.FreedBytes, "freed bytes: %+v", res)
	require.GreaterOrEqual(t, res.KeptBlobs, len(live), "kept: %+v", res)
	require.GreaterOrEqual(t, res.KeptBytes, liveBytes, "kept bytes: %+v", res)
	require.Equal(t, res.KeptBlobs-len(live), res.Young, "every kept blob but the referenced ones was written during the sweep: %+v", res)
	for d := range garbage {
		_, err := s.Get(ctx, d)
		require.ErrorIs(t, err, transcript.ErrNotFound, "unreferenced blob %s is still there", d)
	}
	for d := range live {
		_, err := s.Get(ctx, d)
		require.NoError(t, err, "referenced blob %s was deleted", d)
	}
	require.NotEmpty(t, written, "the writer wrote nothing while the sweep ran")
	for _, d := range written {
		_, err := s.Get(ctx, d)
		require.NoError(t, err, "blob %s written during the sweep was deleted", d)
	}

	// A second sweep with the same references frees nothing more.
	again, err := s.Sweep(ctx, func(d transcript.Digest) bool { _, ok := live[d]; return ok },
		transcriptstore.SweepCutoff(markStart, 0))
	require.NoError(t, err)
	require.Zero(t, again.FreedBlobs, "%+v", again)
}

func mergeDigests(a, b map[transcript.Digest]int64) map[transcript.Digest]int64 {
	out := map[transcript.Digest]int64{}
	for _, m := range []map[transcript.Digest]int64{a, b} {
		for d, n := range m {
			out[d] = n
		}
	}
	return out
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// modTime is when blob d was stored, by the store's clock.
func modTime(t *testing.T, s *transcriptstore.Store, d transcript.Digest) time.Time {
	t.Helper()
	ts, err := s.ModTime(context.Background(), d)
	require.NoError(t, err)
	require.False(t, ts.IsZero())
	return ts
}

// TestPutRefreshesOldBlob: putting content whose stored copy is older than
// RefreshAge writes it again, so a sweep sees it as new.
func TestPutRefreshesOldBlob(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := transcriptstore.Open(dir)
	require.NoError(t, err)
	d, err := s.Put(ctx, []byte("system prompt"))
	require.NoError(t, err)
	h := strings.TrimPrefix(string(d), "sha256:")
	p := filepath.Join(dir, h[:2], h)
	old := time.Now().Add(-2 * transcriptstore.RefreshAge)
	require.NoError(t, os.Chtimes(p, old, old))

	_, err = s.Put(ctx, []byte("system prompt"))
	require.NoError(t, err)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.True(t, fi.ModTime().After(time.Now().Add(-transcriptstore.RefreshAge)), "the blob was not refreshed: %s", fi.ModTime())

	res, err := s.Sweep(ctx, func(transcript.Digest) bool { return false }, transcriptstore.SweepCutoff(time.Now(), transcriptstore.RefreshAge))
	require.NoError(t, err)
	require.Zero(t, res.FreedBlobs, "a refreshed blob is younger than the cutoff: %+v", res)
}
