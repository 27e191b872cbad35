// Package storage keeps the bytes of transcripts and checkpoints where every
// process of a run can reach them: a local directory (the default, and what
// a plain path names) or an object store reached through gocloud.dev/blob
// (S3 and S3-compatible servers), chosen by one location string:
//
//	/var/lib/turnstile/ckpt                       a local directory
//	file:///var/lib/turnstile/ckpt                the same
//	s3://bucket/ckpt?region=us-east-1             AWS S3, credentials from the AWS environment
//	s3://bucket/ckpt?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true
//	                                              an S3-compatible server
//
// An object store's URL takes the query parameters of gocloud's URL opener
// for its scheme (for s3: region, endpoint, use_path_style, disable_https,
// profile, …); its path is a key prefix. Credentials never go in the URL:
// they come from the environment the process runs in (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, a profile, an instance role).
//
// Both backends give the guarantees the callers build on: a write is atomic
// (a reader sees nothing, the old object or the whole new one, never part of
// one), Create refuses to replace what exists (a conditional write: the
// local backend links a finished temporary file into place, an object store
// sends If-None-Match: *), and names are checked before they touch anything.
package storage

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"time"
)

// ErrNotExist is what Open, Stat and Read wrap when nothing is stored
// under a name; it is fs.ErrNotExist, so os.IsNotExist-style checks work
// for both backends.
var ErrNotExist = fs.ErrNotExist

// ErrExist is what Create wraps when something is already stored under
// the name; it is fs.ErrExist.
var ErrExist = fs.ErrExist

// ErrUnavailable is what an object store's errors wrap when the store did
// not give an answer about the object (a network error, a 5xx, throttling,
// a timeout): retrying may succeed, and nothing can be concluded about
// what is stored.
var ErrUnavailable = errors.New("storage unavailable")

// Store is a namespace of objects under one location. Names are relative,
// slash-separated paths ("manifest.json", "staging/members.json"); each
// element is non-empty and neither "." nor "..".
type Store interface {
	// Location is the store's location: an absolute path or a URL. Join
	// it with a name to tell another process where an object is.
	Location() string
	// Sub is the store under the relative path name (a subdirectory, a
	// longer key prefix). It shares this store's connection.
	Sub(name string) (Store, error)
	// Write creates or replaces name with what fill writes. A reader sees
	// the previous object (or none) or all of the new one; when fill or
	// the write fails, nothing changes. A local write is durable (fsynced)
	// when Write returns.
	Write(ctx context.Context, name string, fill func(io.Writer) error) error
	// Create stores data under name only if nothing is there; otherwise it
	// returns an error wrapping ErrExist and changes nothing. Object stores
	// that ignore conditional writes replace the object instead, so
	// callers use Create where equal content is the only thing a racing
	// writer could store (content addressing, deterministic manifests).
	Create(ctx context.Context, name string, data []byte) error
	// Open returns a reader of name and its size. Anything but a regular
	// file (a symlink, a directory) is refused; absent, the error wraps
	// ErrNotExist.
	Open(ctx context.Context, name string) (io.ReadCloser, int64, error)
	// Stat describes name; absent, the error wraps ErrNotExist.
	Stat(ctx context.Context, name string) (Entry, error)
	// List returns the entries directly under the store, sorted by name.
	// A store nothing was written to lists empty.
	List(ctx context.Context) ([]Entry, error)
	// Remove deletes name; absent is not an error.
	Remove(ctx context.Context, name string) error
}

// Entry is one name directly under a store.
type Entry struct {
	Name string
	Size int64
	// Regular is true for a stored object (a regular file); false for a
	// directory (a common key prefix), a symlink or a device.
	Regular bool
	// Dir is true for a directory or a common key prefix.
	Dir bool
	// ModTime is when the object was last written, by the clock of the
	// machine that stores it (an object store's own clock; some keep whole
	// seconds only). Zero when the backend does not say (the memory store,
	// a common key prefix).
	ModTime time.Time
}

// Syncer is implemented by stores whose writes need a separate step to
// become durable after a crash (a local directory's entries). Sync makes
// every completed write under the store durable.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Sync makes st's completed writes durable where the backend needs it; it
// does nothing for an object store, whose writes are durable when they
// return.
func Sync(ctx context.Context, st Store) error {
	if s, ok := st.(Syncer); ok {
		return s.Sync(ctx)
	}
	return nil
}

// ReadAll reads name whole, refusing more than limit bytes (limit <= 0:
// no limit) before reading any.
func ReadAll(ctx context.Context, st Store, name string, limit int64) ([]byte, error) {
	rc, size, err := st.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if limit > 0 && size > limit {
		return nil, errors.New(st.Location() + ": " + name + ": larger than the limit for it")
	}
	r := io.Reader(rc)
	if limit > 0 {
		r = io.LimitReader(rc, limit+1)
	}
	return io.ReadAll(r)
}

// WriteBytes is Write of data.
func WriteBytes(ctx context.Context, st Store, name string, data []byte) error {
	return st.Write(ctx, name, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
