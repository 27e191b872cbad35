package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
)

func TestSize(t *testing.T) {
	tests := []struct {
		name     string
		sections []artifact.Section
		opts     artifact.Options
	}{
		{name: "sample sections", sections: sampleSections()},
		{name: "many shards", sections: sampleSections(), opts: artifact.Options{MaxShardRecords: 2}},
		{name: "empty section", sections: []artifact.Section{{Name: "agents", Records: []artifact.Record{}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := artifact.Write(context.Background(), dir, testMeta, tt.sections, tt.opts)
			require.NoError(t, err, "Write")
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var want int64
			for _, e := range entries {
				fi, err := e.Info()
				require.NoError(t, err)
				want += fi.Size()
			}
			got, err := artifact.Size(dir, m)
			require.NoError(t, err, "Size")
			assert.Equal(t, want, got, "Size = %d, the files in the directory take %d", got, want)
		})
	}
}

func TestSizeWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	m, err := artifact.Write(context.Background(), dir, testMeta, sampleSections(), artifact.Options{})
	require.NoError(t, err, "Write")
	require.NoError(t, os.Remove(filepath.Join(dir, artifact.ManifestName)))
	_, err = artifact.Size(dir, m)
	assert.ErrorIs(t, err, os.ErrNotExist, "Size without a manifest file: got %v, want a not-exist error", err)
}
