package storage_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
)

// backends are the stores every behaviour is checked on: a local
// directory always, a real S3-compatible server when its binary is there.
func backends(t *testing.T) map[string]func(t *testing.T) storage.Store {
	return map[string]func(t *testing.T) storage.Store{
		"dir": func(t *testing.T) storage.Store {
			st, err := storage.Dir(filepath.Join(t.TempDir(), "store"))
			require.NoError(t, err)
			return st
		},
		"memory": func(t *testing.T) storage.Store {
			st, err := storage.Memory("bkt")
			require.NoError(t, err)
			return st
		},
		"s3": func(t *testing.T) storage.Store {
			srv := s3test.Start(t)
			srv.SetEnv(t)
			var o storage.Opener
			t.Cleanup(func() { o.Close() })
			st, err := o.Open(context.Background(), srv.Bucket(t, "bkt", "pre/fix"))
			require.NoError(t, err)
			return st
		},
	}
}

func TestStoreContract(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := open(t)
			checkEmpty(ctx, t, st)
			checkWriteRead(ctx, t, st)
			checkFailedWrite(ctx, t, st)
			checkCreate(ctx, t, st)
			checkListAndSub(ctx, t, st)
			checkRemove(ctx, t, st)
			checkBadNames(ctx, t, st)
		})
	}
}

func checkEmpty(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	l, err := st.List(ctx)
	require.NoError(t, err, "List of a new store")
	require.Empty(t, l, "List of a new store")
	_, _, err = st.Open(ctx, "missing")
	require.ErrorIs(t, err, storage.ErrNotExist, "Open(missing)")
	_, err = st.Stat(ctx, "missing")
	require.ErrorIs(t, err, storage.ErrNotExist, "Stat(missing) = %v; want ErrNotExist", err)
}

func checkWriteRead(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	for _, data := range [][]byte{[]byte("first"), []byte("second, longer")} {
		require.NoError(t, storage.WriteBytes(ctx, st, "a/b.json", data))
		got, err := storage.ReadAll(ctx, st, "a/b.json", 0)
		require.NoError(t, err, "read back %q, %v; want %q", got, err, data)
		require.Equal(t, string(data), string(got), "read back %q, %v; want %q", got, err, data)
		e, err := st.Stat(ctx, "a/b.json")
		require.NoError(t, err, "Stat = %+v, %v", e, err)
		require.Equal(t, int64(len(data)), e.Size, "Stat = %+v, %v", e, err)
		require.True(t, e.Regular, "Stat = %+v, %v", e, err)
		require.Equal(t, "b.json", e.Name, "Stat = %+v, %v", e, err)
	}
	_, err := storage.ReadAll(ctx, st, "a/b.json", 3)
	require.Error(t, err, "ReadAll over its limit succeeded")
}

func checkFailedWrite(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	boom := errors.New("boom")
	err := st.Write(ctx, "torn", func(w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom, "Write with a failing fill = %v; want its error", err)
	_, err = st.Stat(ctx, "torn")
	require.ErrorIs(t, err, storage.ErrNotExist, "a failed write left an object: %v", err)
}

func checkCreate(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	require.NoError(t, st.Create(ctx, "once", []byte("v1")))
	err := st.Create(ctx, "once", []byte("v2"))
	require.ErrorIs(t, err, storage.ErrExist, "second Create = %v; want ErrExist", err)
	got, _ := storage.ReadAll(ctx, st, "once", 0)
	require.Equal(t, "v1", string(got), "Create replaced the object: %q", got)
}

func checkListAndSub(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	l, err := st.List(ctx)
	require.NoError(t, err)
	var names []string
	for _, e := range l {
		names = append(names, e.Name)
		if e.Name == "a" {
			assert.True(t, e.Dir, "entry a = %+v; want a directory", e)
			assert.False(t, e.Regular, "entry a = %+v; want a directory", e)
		}
	}
	require.Equal(t, []string{"a", "once"}, names, "List")
	sub, err := st.Sub("a")
	require.NoError(t, err)
	got, err := storage.ReadAll(ctx, sub, "b.json", 0)
	require.NoError(t, err, "read through Sub: %q, %v", got, err)
	require.NotEmpty(t, got, "read through Sub: %q, %v", got, err)
	want, _ := location.Join(st.Location(), "a")
	require.Equal(t, want, sub.Location(), "Sub location %q; want %q", sub.Location(), want)
}

func checkRemove(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	require.NoError(t, st.Remove(ctx, "once"))
	require.NoError(t, st.Remove(ctx, "once"), "removing what is gone")
	_, err := st.Stat(ctx, "once")
	require.ErrorIs(t, err, storage.ErrNotExist, "removed object still there: %v", err)
}

func checkBadNames(ctx context.Context, t *testing.T, st storage.Store) {
	t.Helper()
	for _, name := range []string{"", "/abs", "../up", "a//b", "a/./b", "a\\b"} {
		assert.Error(t, storage.WriteBytes(ctx, st, name, []byte("x")), "Write(%q) succeeded", name)
		_, _, err := st.Open(ctx, name)
		assert.Error(t, err, "Open(%q) succeeded", name)
	}
}

// A symlink in a local store is not an object: Open refuses it.
func TestDirRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "target"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "link")))
	st, err := storage.Dir(dir)
	require.NoError(t, err)
	_, _, err = st.Open(context.Background(), "link")
	require.Error(t, err, "Open of a symlink succeeded")
	l, _ := st.List(context.Background())
	for _, e := range l {
		if e.Name == "link" {
			require.False(t, e.Regular, "List reports a symlink as regular")
		}
	}
}

// An in-memory store is private to its process: the Opener refuses to
// hand one out by location, and two Memory stores share nothing.
func TestMemoryIsPrivate(t *testing.T) {
	ctx := context.Background()
	var o storage.Opener
	defer o.Close()
	refused, err := o.Open(ctx, "mem://bkt/ckpt")
	require.Error(t, err, "Opener.Open(mem://…) = %v, %v; want a refusal", refused, err)
	require.Nil(t, refused, "Opener.Open(mem://…) = %v, %v; want a refusal", refused, err)
	a, err := storage.Memory("bkt")
	require.NoError(t, err)
	b, err := storage.Memory("bkt")
	require.NoError(t, err)
	require.NoError(t, storage.WriteBytes(ctx, a, "x", []byte("1")))
	_, err = b.Stat(ctx, "x")
	require.ErrorIs(t, err, storage.ErrNotExist, "a second memory store sees the first one's object: %v", err)
	for _, bad := range []string{"", "bkt/prefix", "bkt?x=1"} {
		_, err := storage.Memory(bad)
		assert.Error(t, err, "Memory(%q) succeeded", bad)
	}
}
