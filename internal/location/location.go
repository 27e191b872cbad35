// Package location parses and joins the places turnstile keeps files: an
// absolute directory, file:///…, or an object-store prefix
// (scheme://bucket/prefix?query). It does no I/O, so workflow code may
// compute a checkpoint's location with it.
package location

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
)

// IsURL reports whether location names an object store or a file:// URL
// rather than a plain path.
func IsURL(location string) bool { return strings.Contains(location, "://") }

// Location is a parsed location: a local directory or an object-store
// prefix.
type Location struct {
	// Dir is the absolute local directory, for a path or a file:// URL.
	Dir string
	// Scheme, Bucket, Prefix and RawQuery name an object-store prefix:
	// scheme://bucket/prefix?query. Prefix has no leading or trailing
	// slash and may be empty. The query is kept as it was given (no map
	// is iterated to print it, so workflow code may join locations).
	Scheme, Bucket, Prefix, RawQuery string
}

// Local reports whether l is a local directory.
func (l Location) Local() bool { return l.Dir != "" }

// String is the canonical form of l: the directory, or the URL.
func (l Location) String() string {
	if l.Local() {
		return l.Dir
	}
	u := url.URL{Scheme: l.Scheme, Host: l.Bucket, RawQuery: l.RawQuery}
	if l.Prefix != "" {
		u.Path = "/" + l.Prefix
	}
	return u.String()
}

// BucketKey identifies the bucket connection l needs: everything but the
// prefix.
func (l Location) BucketKey() string {
	return (&url.URL{Scheme: l.Scheme, Host: l.Bucket, RawQuery: l.RawQuery}).String()
}

// Parse parses a location: an absolute path, file:///abs/path, or
// scheme://bucket[/prefix][?query] for an object store. A relative path is
// refused, since other processes would resolve it against their own
// working directories; make it absolute first (filepath.Abs).
func Parse(location string) (Location, error) {
	if location == "" {
		return Location{}, fmt.Errorf("storage: empty location")
	}
	if !IsURL(location) {
		if !filepath.IsAbs(location) {
			return Location{}, fmt.Errorf("storage: location %q is neither an absolute path nor a URL (file:///…, s3://bucket/…)", location)
		}
		return Location{Dir: filepath.Clean(location)}, nil
	}
	u, err := url.Parse(location)
	if err != nil {
		return Location{}, fmt.Errorf("storage: location %q: %w", location, err)
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return Location{}, fmt.Errorf("storage: location %q: no user info, fragment or opaque part allowed (credentials come from the environment)", location)
	}
	if u.Scheme == "file" {
		if (u.Host != "" && u.Host != "localhost") || u.RawQuery != "" || !path.IsAbs(u.Path) {
			return Location{}, fmt.Errorf("storage: location %q: want file:///absolute/path with no host or query", location)
		}
		return Location{Dir: filepath.Clean(filepath.FromSlash(u.Path))}, nil
	}
	if u.Host == "" {
		return Location{}, fmt.Errorf("storage: location %q names no bucket (want %s://bucket/prefix?…)", location, u.Scheme)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Location{}, fmt.Errorf("storage: location %q: query: %w", location, err)
	}
	if q.Has("prefix") || q.Has("key") {
		return Location{}, fmt.Errorf("storage: location %q: give the key prefix as the URL path, not as a prefix= or key= parameter", location)
	}
	prefix := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if prefix != "" {
		if err := CheckName(prefix); err != nil {
			return Location{}, fmt.Errorf("storage: location %q: prefix: %w", location, err)
		}
	}
	return Location{Scheme: u.Scheme, Bucket: u.Host, Prefix: prefix, RawQuery: u.RawQuery}, nil
}

// Join returns location with the relative path elems appended: a
// subdirectory of a directory, a longer prefix of an object store (its
// query kept).
func Join(location string, elems ...string) (string, error) {
	l, err := Parse(location)
	if err != nil {
		return "", err
	}
	rel := path.Join(elems...)
	if err := CheckName(rel); err != nil {
		return "", fmt.Errorf("storage: join %q to %s: %w", rel, location, err)
	}
	return l.Child(rel).String(), nil
}

// Child is l with the relative, slash-separated path rel appended.
func (l Location) Child(rel string) Location {
	if l.Local() {
		l.Dir = filepath.Join(l.Dir, filepath.FromSlash(rel))
		return l
	}
	if l.Prefix == "" {
		l.Prefix = rel
	} else {
		l.Prefix += "/" + rel
	}
	return l
}

// CheckName checks a relative, slash-separated object name.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("empty name")
	}
	if strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("name %q: want a relative, slash-separated path", name)
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == "" || elem == "." || elem == ".." {
			return fmt.Errorf("name %q: empty, '.' or '..' element", name)
		}
	}
	return nil
}
