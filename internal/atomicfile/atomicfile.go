// Package atomicfile writes files so that a reader, or the directory after a
// crash, sees either the file as it was or the whole new file, never a part
// of one.
//
// A write goes to a temporary file in the target's directory (a rename is
// atomic only within one file system), which is fsynced and closed before
// it is renamed into place; the directory is then fsynced so that the
// rename itself survives a crash.
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TempPrefix begins the name of every temporary file this package creates,
// so that a directory scan can tell the leftover of a torn write from a
// real file. The name goes on with the target's base name and a random
// suffix.
const TempPrefix = ".tmp-"

// Write creates or replaces path with what fill writes, with permissions
// perm. fill's error is returned as it is; nothing is left behind when it
// fails, and path is untouched. The directory must exist.
func Write(path string, perm os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = fill(f)
	if err == nil {
		// Chmod, not the umask: the file gets exactly perm.
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
}

// WriteFile is Write of data: like os.WriteFile, but atomic and durable.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// SyncDir fsyncs directory dir, so that a file created, renamed or removed
// in it stays so after a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %q: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %q: %w", dir, err)
	}
	return nil
}
