package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFileAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	require.NoError(t, writeFileAtomically(path, func(w io.Writer) error { _, err := io.WriteString(w, "{}\n"); return err }))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "{}\n", string(b), "file")
	// A failed export leaves neither the file nor its partial copy.
	failed := filepath.Join(dir, "failed.jsonl")
	err = writeFileAtomically(failed, func(w io.Writer) error { _, _ = io.WriteString(w, "{"); return errors.New("boom") })
	require.Error(t, err, "a failed write succeeded")
	for _, p := range []string{failed, failed + ".partial"} {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s exists after a failed export (%v)", p, err)
	}
}

func TestOpenTranscriptsRefusesMissingDir(t *testing.T) {
	ctx := context.Background()
	_, err := openTranscripts(ctx, nil, filepath.Join(t.TempDir(), "nope"))
	require.Error(t, err, "a missing transcript directory was accepted")
	_, err = openTranscripts(ctx, nil, t.TempDir())
	require.NoError(t, err)
	_, err = openTranscripts(ctx, nil, "s3://bucket/x?nope=1")
	require.Error(t, err, "an object store without an opener was accepted")
}
