package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/location"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	// The object stores a location may name, by URL scheme. Another
	// gocloud driver (gcsblob for gs://, azureblob for azblob://) is one
	// blank import here.
	_ "gocloud.dev/blob/s3blob"
)

// Opener opens stores by location and keeps one connection per object
// store bucket (URL without its path) until Close. Its zero value is ready
// to use; it is safe for concurrent use.
type Opener struct {
	// Allow, when set, is asked before an object store is opened, so
	// before any request is signed with the process's credentials: an
	// error refuses the location (a worker admits only the endpoints its
	// operator configured; see package destination). Local directories are
	// not asked about.
	Allow func(location string) error
	// FileMode is the mode local directories it opens write files with
	// (0: DefaultFileMode).
	FileMode fs.FileMode

	mu      sync.Mutex
	buckets map[string]*blob.Bucket
	closed  bool
}

// Open returns the store at location (see location.Parse). A local
// directory may also be given as a relative path here: it is made
// absolute against this process's working directory. A nil Opener opens
// local directories only.
func (o *Opener) Open(ctx context.Context, where string) (Store, error) {
	if where != "" && !location.IsURL(where) {
		return DirWithMode(where, o.fileMode())
	}
	l, err := location.Parse(where)
	if err != nil {
		return nil, err
	}
	if l.Local() {
		return DirWithMode(l.Dir, o.fileMode())
	}
	if l.Scheme == memScheme {
		// An in-memory bucket is private to this process: a checkpoint or
		// transcript "stored" there would be lost with it and invisible to
		// every other process of the run.
		return nil, fmt.Errorf("storage: open %s: in-memory stores are private to one process and cannot be shared by location (tests use storage.Memory)", where)
	}
	if o == nil {
		return nil, fmt.Errorf("storage: open %s: no opener for object stores", l.BucketKey())
	}
	if o.Allow != nil {
		if err := o.Allow(where); err != nil {
			return nil, fmt.Errorf("storage: open %s: %w", l.Scheme+"://"+l.Bucket, err)
		}
	}
	b, err := o.bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	return &bucketStore{b: b, loc: l}, nil
}

// fileMode is the mode of local files; a nil Opener writes DefaultFileMode.
func (o *Opener) fileMode() fs.FileMode {
	if o == nil {
		return DefaultFileMode
	}
	return o.FileMode
}

func (o *Opener) bucket(ctx context.Context, l location.Location) (*blob.Bucket, error) {
	key := l.BucketKey()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, fmt.Errorf("storage: open %s: opener closed", key)
	}
	if b := o.buckets[key]; b != nil {
		return b, nil
	}
	b, err := blob.OpenBucket(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", key, err)
	}
	if o.buckets == nil {
		o.buckets = map[string]*blob.Bucket{}
	}
	o.buckets[key] = b
	return b, nil
}

// Close closes every bucket connection the opener made; stores it opened
// must not be used afterwards.
func (o *Opener) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	var errs []error
	for key, b := range o.buckets {
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("storage: close %s: %w", key, err))
		}
	}
	o.buckets = nil
	return errors.Join(errs...)
}

// bucketStore is a key prefix in an object store. Every write is one PUT
// (or one multipart upload, completed at the end), which the store makes
// visible whole or not at all.
type bucketStore struct {
	b   *blob.Bucket
	loc location.Location
}

func (s *bucketStore) Location() string { return s.loc.String() }

func (s *bucketStore) Sub(name string) (Store, error) {
	if err := location.CheckName(name); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", s.Location(), err)
	}
	return &bucketStore{b: s.b, loc: s.loc.Child(name)}, nil
}

func (s *bucketStore) key(name string) (string, error) {
	if err := location.CheckName(name); err != nil {
		return "", fmt.Errorf("storage: %s: %w", s.Location(), err)
	}
	return s.loc.Child(name).Prefix, nil
}

// wrap maps gocloud's error codes onto ErrNotExist and ErrExist and names
// the object.
func (s *bucketStore) wrap(op, name string, err error) error {
	if err == nil {
		return nil
	}
	where := s.loc.Child(name).String()
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("storage: %s %s: %w", op, where, ErrNotExist)
	case gcerrors.FailedPrecondition:
		return fmt.Errorf("storage: %s %s: %w (%v)", op, where, ErrExist, err)
	case gcerrors.InvalidArgument, gcerrors.PermissionDenied, gcerrors.Unimplemented:
		return fmt.Errorf("storage: %s %s: %w", op, where, err)
	}
	return fmt.Errorf("storage: %s %s: %w: %w", op, where, ErrUnavailable, err)
}

var writerOptions = blob.WriterOptions{ContentType: "application/octet-stream"}

func (s *bucketStore) Write(ctx context.Context, name string, fill func(io.Writer) error) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	// Cancelling the writer's context before Close aborts the upload: a
	// failed fill stores nothing.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(wctx, key, &writerOptions)
	if err != nil {
		return s.wrap("write", name, err)
	}
	if err := fill(w); err != nil {
		cancel()
		_ = w.Close()
		return err
	}
	return s.wrap("write", name, w.Close())
}

func (s *bucketStore) Create(ctx context.Context, name string, data []byte) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	opts := writerOptions
	opts.IfNotExist = true
	return s.wrap("create", name, s.b.WriteAll(ctx, key, data, &opts))
}

func (s *bucketStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, 0, err
	}
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		return nil, 0, s.wrap("read", name, err)
	}
	return r, r.Size(), nil
}

func (s *bucketStore) Stat(ctx context.Context, name string) (Entry, error) {
	key, err := s.key(name)
	if err != nil {
		return Entry{}, err
	}
	a, err := s.b.Attributes(ctx, key)
	if err != nil {
		return Entry{}, s.wrap("stat", name, err)
	}
	base := name[strings.LastIndex(name, "/")+1:]
	return Entry{Name: base, Size: a.Size, Regular: true, ModTime: a.ModTime}, nil
}

// List lists one level under the prefix: objects, and common prefixes as
// directories.
func (s *bucketStore) List(ctx context.Context) ([]Entry, error) {
	prefix := ""
	if s.loc.Prefix != "" {
		prefix = s.loc.Prefix + "/"
	}
	it := s.b.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	out := []Entry{}
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, s.wrap("list", ".", err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(obj.Key, prefix), "/")
		if name == "" {
			continue // a "directory marker" object some tools create
		}
		out = append(out, Entry{Name: name, Size: obj.Size, Regular: !obj.IsDir, Dir: obj.IsDir, ModTime: obj.ModTime})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *bucketStore) Remove(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	err = s.b.Delete(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return s.wrap("remove", name, err)
}
