package destination

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Canonical parses a destination URL and returns its canonical form:
// http or https, a host, no user info, query or fragment; scheme and host
// lower-case, the scheme's default port dropped, no trailing slash. What is
// checked is what is sent: callers send to the canonical form.
func Canonical(raw string) (string, error) {
	u, err := parse(raw)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// parse is Canonical's parse, returning the canonical URL.
func parse(raw string) (*url.URL, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return nil, errors.New("empty URL")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", raw, err)
	}
	if err := checkShape(u, raw); err != nil {
		return nil, err
	}
	host, port, err := hostPort(u)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", raw, err)
	}
	return &url.URL{Scheme: strings.ToLower(u.Scheme), Host: joinHost(host, port), Path: strings.TrimRight(u.Path, "/")}, nil
}

// checkShape refuses what a destination URL must not hold.
func checkShape(u *url.URL, raw string) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", raw)
	case u.Opaque != "" || u.Host == "":
		return fmt.Errorf("%q: names no host", raw)
	case u.User != nil:
		return fmt.Errorf("%q: user info is not allowed in a destination URL", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("%q: a query or fragment is not allowed in a destination URL", raw)
	case strings.Contains(u.Path, "/../") || strings.HasSuffix(u.Path, "/..") || strings.Contains(u.Path, "/./"):
		return fmt.Errorf("%q: '.' and '..' path elements are not allowed", raw)
	}
	return nil
}

// hostPort splits u's host into a lower-case host name and a port ("" for
// the scheme's default).
func hostPort(u *url.URL) (string, string, error) {
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return "", "", errors.New("names no host")
	}
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	return strings.ToLower(host), port, nil
}

// joinHost is host[:port], an IPv6 address in brackets.
func joinHost(host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" {
		return host
	}
	return host + ":" + port
}

// Prefix is one allowlist entry: a scheme, a host, a port (or any port)
// and a path prefix. A URL matches when scheme, host and port are equal and
// its path is the prefix's or lies under it (a whole path element: prefix
// /v1 admits /v1 and /v1/chat, not /v10).
type Prefix struct {
	scheme, host, port, path string
	raw                      string
}

// ParsePrefix parses an allowlist entry: http(s)://host[:port][/path],
// port "*" for any port (http://127.0.0.1:* admits every local port).
func ParsePrefix(raw string) (Prefix, error) {
	s := strings.TrimSpace(raw)
	wild := false
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		authority, path, _ := strings.Cut(rest, "/")
		if a, cut := strings.CutSuffix(authority, ":*"); cut {
			wild, s = true, scheme+"://"+a
			if path != "" || strings.HasSuffix(rest, "/") {
				s += "/" + path
			}
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return Prefix{}, fmt.Errorf("%q is not a URL prefix: %w", raw, err)
	}
	if err := checkShape(u, raw); err != nil {
		return Prefix{}, err
	}
	host, port, err := hostPort(u)
	if err != nil {
		return Prefix{}, fmt.Errorf("%q: %w", raw, err)
	}
	if wild {
		if u.Port() != "" {
			return Prefix{}, fmt.Errorf("%q: two ports", raw)
		}
		port = "*"
	}
	return Prefix{scheme: strings.ToLower(u.Scheme), host: host, port: port, path: strings.TrimRight(u.Path, "/"), raw: strings.TrimSpace(raw)}, nil
}

// String is the entry as it was given.
func (p Prefix) String() string { return p.raw }

// Match reports whether the canonical URL u lies under p.
func (p Prefix) Match(u *url.URL) bool {
	if u.Scheme != p.scheme || u.Hostname() != p.host {
		return false
	}
	port := u.Port()
	if p.port != "*" && port != p.port {
		return false
	}
	return p.path == "" || u.Path == p.path || strings.HasPrefix(u.Path, p.path+"/")
}

// ParsePrefixes parses a comma-separated list of entries (blank entries
// are skipped).
func ParsePrefixes(list string) ([]Prefix, error) {
	var out []Prefix
	for _, raw := range strings.Split(list, ",") {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		p, err := ParsePrefix(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
