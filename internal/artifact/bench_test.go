package artifact_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
)

// benchSections is 2000 records of 4 KiB in one section.
func benchSections() []artifact.Section {
	return []artifact.Section{{Name: "transcripts", Records: records("t", 2000, 4096, 7)}}
}

// BenchmarkWrite compares a durable checkpoint Write with a baseline of plain
// os.WriteFile of the same records, one file each, no fsync, measured in the
// same loop; reported as the ratio write/baseline.
func BenchmarkWrite(b *testing.B) {
	secs := benchSections()
	root := b.TempDir()
	var write, base time.Duration
	n := 0
	for b.Loop() {
		n++
		dir := filepath.Join(root, fmt.Sprint("ckpt-", n))
		start := time.Now()
		_, err := artifact.Write(context.Background(), dir, testMeta, secs, artifact.Options{})
		require.NoError(b, err)
		write += time.Since(start)

		plain := filepath.Join(root, fmt.Sprint("plain-", n))
		start = time.Now()
		require.NoError(b, os.Mkdir(plain, 0o755))
		for i, r := range secs[0].Records {
			require.NoError(b, os.WriteFile(filepath.Join(plain, fmt.Sprintf("%05d", i)), r.Data, 0o644))
		}
		base += time.Since(start)
	}
	b.ReportMetric(float64(write)/float64(base), "x-writefile")
	b.ReportMetric(float64(write.Milliseconds())/float64(n), "write-ms/op")
	b.ReportMetric(float64(base.Milliseconds())/float64(n), "writefile-ms/op")
}

// BenchmarkOpen compares a fully validating Open plus Section with a baseline
// of os.ReadFile of the same records, one file each.
func BenchmarkOpen(b *testing.B) {
	secs := benchSections()
	root := b.TempDir()
	dir, plain := filepath.Join(root, "ckpt"), filepath.Join(root, "plain")
	_, err := artifact.Write(context.Background(), dir, testMeta, secs, artifact.Options{})
	require.NoError(b, err)
	require.NoError(b, os.Mkdir(plain, 0o755))
	for i, r := range secs[0].Records {
		require.NoError(b, os.WriteFile(filepath.Join(plain, fmt.Sprintf("%05d", i)), r.Data, 0o644))
	}
	var open, base time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := artifact.Open(context.Background(), dir, testID)
		require.NoError(b, err)
		_, err = c.Section(context.Background(), "transcripts")
		require.NoError(b, err)
		open += time.Since(start)

		start = time.Now()
		for i := range secs[0].Records {
			_, err = os.ReadFile(filepath.Join(plain, fmt.Sprintf("%05d", i)))
			require.NoError(b, err)
		}
		base += time.Since(start)
	}
	b.ReportMetric(float64(open)/float64(base), "x-readfile")
}
