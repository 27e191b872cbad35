package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/location"
)

// memStore is a store held in this process's memory: a map of objects
// shared by the store and its Subs, each a key prefix of it.
type memStore struct {
	objs   *memObjects
	loc    location.Location
	prefix string // "" or "sub/dir/"
}

type memObjects struct {
	mu   sync.Mutex
	data map[string][]byte
}

// Memory returns a new, empty store held in this process's memory, at
// location mem://name. It keeps the Store contract (atomic writes, Create
// refusing to replace, names checked, directories listed as common
// prefixes) and is checked by the same contract test as the other
// backends. It exists for tests and fuzzing, where a store on disk costs
// a file system round trip per object: nothing outlives the process and no
// other process can reach it, which is why Opener refuses mem:// locations.
func Memory(name string) (Store, error) {
	l, err := location.Parse(memScheme + "://" + name)
	if err != nil {
		return nil, fmt.Errorf("storage: memory store %q: %w", name, err)
	}
	if l.Prefix != "" || l.RawQuery != "" {
		return nil, fmt.Errorf("storage: memory store %q: want a bare name (no path or query)", name)
	}
	return &memStore{objs: &memObjects{data: map[string][]byte{}}, loc: l}, nil
}

// memScheme is the URL scheme of Memory's locations.
const memScheme = "mem"

func (m *memStore) Location() string { return m.loc.String() }

func (m *memStore) Sub(name string) (Store, error) {
	if err := location.CheckName(name); err != nil {
		return nil, fmt.Errorf("storage: %s: %w", m.Location(), err)
	}
	return &memStore{objs: m.objs, loc: m.loc.Child(name), prefix: m.prefix + name + "/"}, nil
}

func (m *memStore) key(ctx context.Context, name string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := location.CheckName(name); err != nil {
		return "", fmt.Errorf("storage: %s: %w", m.Location(), err)
	}
	return m.prefix + name, nil
}

func (m *memStore) Write(ctx context.Context, name string, fill func(io.Writer) error) error {
	key, err := m.key(ctx, name)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := fill(&buf); err != nil {
		return err
	}
	m.objs.mu.Lock()
	defer m.objs.mu.Unlock()
	m.objs.data[key] = buf.Bytes()
	return nil
}

func (m *memStore) Create(ctx context.Context, name string, data []byte) error {
	key, err := m.key(ctx, name)
	if err != nil {
		return err
	}
	m.objs.mu.Lock()
	defer m.objs.mu.Unlock()
	if _, ok := m.objs.data[key]; ok {
		return fmt.Errorf("storage: create %s: %w", m.loc.Child(name), ErrExist)
	}
	m.objs.data[key] = bytes.Clone(data)
	return nil
}

// Open returns a reader of the object as it is now; a later write
// replaces the object, never the bytes a reader holds.
func (m *memStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	key, err := m.key(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	m.objs.mu.Lock()
	b, ok := m.objs.data[key]
	m.objs.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("storage: read %s: %w", m.loc.Child(name), ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
}

func (m *memStore) Stat(ctx context.Context, name string) (Entry, error) {
	key, err := m.key(ctx, name)
	if err != nil {
		return Entry{}, err
	}
	m.objs.mu.Lock()
	b, ok := m.objs.data[key]
	m.objs.mu.Unlock()
	if !ok {
		return Entry{}, fmt.Errorf("storage: stat %s: %w", m.loc.Child(name), ErrNotExist)
	}
	return Entry{Name: name[strings.LastIndex(name, "/")+1:], Size: int64(len(b)), Regular: true}, nil
}

// List lists one level under the prefix: objects, and common prefixes as
// directories.
func (m *memStore) List(ctx context.Context) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.objs.mu.Lock()
	defer m.objs.mu.Unlock()
	out := []Entry{}
	dirs := map[string]bool{}
	for key, b := range m.objs.data {
		rest, ok := strings.CutPrefix(key, m.prefix)
		if !ok {
			continue
		}
		if dir, _, isDir := strings.Cut(rest, "/"); isDir {
			if !dirs[dir] {
				dirs[dir] = true
				out = append(out, Entry{Name: dir, Dir: true})
			}
			continue
		}
		out = append(out, Entry{Name: rest, Size: int64(len(b)), Regular: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *memStore) Remove(ctx context.Context, name string) error {
	key, err := m.key(ctx, name)
	if err != nil {
		return err
	}
	m.objs.mu.Lock()
	defer m.objs.mu.Unlock()
	delete(m.objs.data, key)
	return nil
}
