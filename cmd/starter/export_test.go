package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	if err := writeFileAtomically(path, func(w io.Writer) error { _, err := io.WriteString(w, "{}\n"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{}\n" {
		t.Fatalf("file %q, %v", b, err)
	}
	// A failed export leaves neither the file nor its partial copy.
	failed := filepath.Join(dir, "failed.jsonl")
	err := writeFileAtomically(failed, func(w io.Writer) error { _, _ = io.WriteString(w, "{"); return errors.New("boom") })
	if err == nil {
		t.Fatal("a failed write succeeded")
	}
	for _, p := range []string{failed, failed + ".partial"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a failed export (%v)", p, err)
		}
	}
}

func TestOpenTranscriptsRefusesMissingDir(t *testing.T) {
	ctx := context.Background()
	if _, err := openTranscripts(ctx, nil, filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("a missing transcript directory was accepted")
	}
	if _, err := openTranscripts(ctx, nil, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := openTranscripts(ctx, nil, "s3://bucket/x?nope=1"); err == nil {
		t.Fatal("an object store without an opener was accepted")
	}
}
