package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/turnstile-rl/turnstile/internal/atomicfile"
	"github.com/turnstile-rl/turnstile/internal/location"
)

// dirStore is a local directory. Writes go through atomicfile (temporary
// file, fsync, rename, fsync of the directory); directories are created
// on the first write into them. Files get mode, directories DirMode(mode).
type dirStore struct {
	dir  string
	mode fs.FileMode
}

// Dir returns the store of the local directory dir (made absolute). The
// directory is created by the first write into it; files are written with
// DefaultFileMode (private to the process's user), directories with
// DirMode of it.
func Dir(dir string) (Store, error) {
	return DirWithMode(dir, DefaultFileMode)
}

// DirWithMode is Dir writing files with mode (0: DefaultFileMode), for an
// operator who shares transcripts or checkpoints with a group on purpose.
func DirWithMode(dir string, mode fs.FileMode) (Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("storage: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: directory %q: %w", dir, err)
	}
	if mode == 0 {
		mode = DefaultFileMode
	}
	return &dirStore{dir: abs, mode: mode.Perm()}, nil
}

func (d *dirStore) Location() string { return d.dir }

func (d *dirStore) Sub(name string) (Store, error) {
	if err := location.CheckName(name); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", d.dir, err)
	}
	return &dirStore{dir: filepath.Join(d.dir, filepath.FromSlash(name)), mode: d.mode}, nil
}

func (d *dirStore) path(name string) (string, error) {
	if err := location.CheckName(name); err != nil {
		return "", fmt.Errorf("storage: %s: %w", d.dir, err)
	}
	return filepath.Join(d.dir, filepath.FromSlash(name)), nil
}

func (d *dirStore) Write(ctx context.Context, name string, fill func(io.Writer) error) error {
	p, err := d.prepare(ctx, name)
	if err != nil {
		return err
	}
	return atomicfile.Write(p, d.mode, fill)
}

// Create links a finished temporary file to name: link(2) fails when name
// exists, so two writers cannot both create it, and a reader never sees
// part of it.
func (d *dirStore) Create(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The common case of content addressing first: already there.
	if p, err := d.path(name); err == nil {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("storage: create %s: %w", p, ErrExist)
		}
	}
	p, err := d.prepare(ctx, name)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	f, err := os.CreateTemp(dir, atomicfile.TempPrefix+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", p, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(d.mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, p)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("storage: create %s: %w", p, ErrExist)
	}
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", p, err)
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("storage: create %s: %w", p, err)
	}
	return atomicfile.SyncDir(dir)
}

// prepare checks name and makes its directory exist, durably.
func (d *dirStore) prepare(ctx context.Context, name string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	p, err := d.path(name)
	if err != nil {
		return "", err
	}
	if err := mkdirs(filepath.Dir(p), DirMode(d.mode)); err != nil {
		return "", fmt.Errorf("storage: %w", err)
	}
	return p, nil
}

// mkdirs creates dir and its missing parents with mode, fsyncing each
// parent that gained an entry, so the new directories survive a crash.
func mkdirs(dir string, mode fs.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirs(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return atomicfile.SyncDir(parent)
}

func (d *dirStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	p, err := d.path(name)
	if err != nil {
		return nil, 0, err
	}
	lfi, err := os.Lstat(p)
	if err != nil {
		return nil, 0, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s: not a regular file (%s)", p, lfi.Mode().Type())
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil || !os.SameFile(lfi, fi) {
		f.Close()
		return nil, 0, fmt.Errorf("%s: changed while opening it", p)
	}
	return f, fi.Size(), nil
}

func (d *dirStore) Stat(ctx context.Context, name string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	p, err := d.path(name)
	if err != nil {
		return Entry{}, err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return Entry{}, err
	}
	return entryOf(fi), nil
}

func entryOf(fi fs.FileInfo) Entry {
	return Entry{Name: fi.Name(), Size: fi.Size(), Regular: fi.Mode().IsRegular(), Dir: fi.IsDir(), ModTime: fi.ModTime()}
}

func (d *dirStore) List(ctx context.Context) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []Entry{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(des))
	for _, de := range des {
		fi, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, entryOf(fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (d *dirStore) Remove(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Sync fsyncs the directory, so renames and removals in it survive a
// crash.
func (d *dirStore) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := os.Stat(d.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return atomicfile.SyncDir(d.dir)
}
