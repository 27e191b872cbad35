package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/turnstile-rl/turnstile/trainer"
)

// readDataset reads the JSONL dataset at path inside the dataset root:
// resolved through os.Root (no "..", no symlink out of the root), a regular
// file only, at most DatasetMaxBytes, read under ctx (a cancelled request
// stops reading). A path outside the root is refused before anything is
// touched, so the answer says nothing about what exists there; a bad row
// is reported by its line and what was wrong, never by its content.
func (s *Server) readDataset(ctx context.Context, path string) ([]trainer.DatasetRow, error) {
	if s.cfg.DatasetRoot == "" {
		return nil, badRequest("dataset_path", "this gateway reads no dataset files (it was started without --dataset-root): send the rows inline in rows")
	}
	name, err := datasetName(s.cfg.DatasetRoot, path)
	if err != nil {
		return nil, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: %v", path, err))
	}
	f, size, err := openDataset(s.cfg.DatasetRoot, name)
	if err != nil {
		return nil, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: %v", path, err))
	}
	defer f.Close()
	limit := s.cfg.DatasetMaxBytes
	if size > limit {
		return nil, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: %d bytes, more than the gateway reads (--dataset-max-bytes %d)", path, size, limit))
	}
	lr := &io.LimitedReader{R: ctxReader{ctx: ctx, r: f}, N: limit + 1}
	rows, err := trainer.ReadDataset(lr)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case lr.N <= 0:
		return nil, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: grew past the %d bytes the gateway reads (--dataset-max-bytes)", path, limit))
	case err != nil:
		return nil, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: %s", path, datasetSummary(err)))
	}
	return rows, nil
}

// datasetName is path as a name relative to root: a relative path as it
// is, an absolute one only when it lies under root. Nothing is touched:
// outside the root, a file that exists and one that does not are refused
// alike.
func datasetName(root, path string) (string, error) {
	if strings.TrimSpace(path) == "" || strings.ContainsRune(path, 0) {
		return "", errors.New("empty or not a path")
	}
	name := filepath.Clean(path)
	if filepath.IsAbs(name) {
		rel, err := filepath.Rel(filepath.Clean(root), name)
		if err != nil {
			return "", errOutsideRoot
		}
		name = rel
	}
	if name == "." || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) || filepath.IsAbs(name) {
		return "", errOutsideRoot
	}
	return name, nil
}

var errOutsideRoot = errors.New("not under the gateway's dataset root (--dataset-root); give a path relative to it")

// openDataset opens name under root as a regular file and returns it with
// its size. It opens without blocking (a FIFO would wait for a writer) and
// checks the file it opened, not only the name it looked up.
func openDataset(root, name string) (*os.File, int64, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, 0, errors.New("the gateway's dataset root cannot be opened")
	}
	defer r.Close()
	st, err := r.Stat(name)
	if err != nil {
		return nil, 0, openError(err)
	}
	if !st.Mode().IsRegular() {
		return nil, 0, errNotRegular
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, openError(err)
	}
	got, err := f.Stat()
	if err != nil || !got.Mode().IsRegular() || !os.SameFile(st, got) {
		f.Close()
		return nil, 0, errNotRegular
	}
	return f, got.Size(), nil
}

var errNotRegular = errors.New("not a regular file (a dataset is a regular file inside the dataset root)")

// openError says why a name under the root cannot be opened, in general
// terms.
func openError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("no such file under the dataset root")
	case errors.Is(err, fs.ErrPermission):
		return errors.New("the gateway may not read it")
	}
	return errors.New("cannot be opened inside the dataset root (a link out of it, or not a file)")
}

// datasetSummary is a dataset error in general terms: a file's rows are
// never echoed back. ReadDataset's other errors (no rows, a line too long,
// a read that failed) hold nothing of the file.
func datasetSummary(err error) string {
	var de *trainer.DatasetError
	if errors.As(err, &de) {
		return de.Summary()
	}
	return err.Error()
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
