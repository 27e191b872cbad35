package conformance

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// postOversize sends body to route over a connection of its own and reads
// the answer while the body is still being written: a participant may
// refuse a body by its Content-Length and close the connection without
// reading it (R15 allows that), and an HTTP client that writes the whole
// body before it reads would only see the closed connection, not the
// answer. The answer is judged against the document like every other.
func (k *kit) postOversize(ctx context.Context, route, id, authorization string, body []byte) (answer, error) {
	method, path, _ := strings.Cut(route, " ")
	path = strings.Replace(path, "{rollout_id}", url.PathEscape(id), 1)
	u, err := url.Parse(k.cfg.URL)
	if err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := k.dial(ctx, u)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		method, u.EscapedPath()+path, u.Host, authorization, len(body))
	go func() {
		// Errors here are the participant closing early; the answer says
		// what it did.
		if _, err := io.WriteString(conn, head); err == nil {
			_, _ = conn.Write(body)
		}
	}()
	req, err := http.NewRequestWithContext(ctx, method, k.cfg.URL+path, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s with a body of %d bytes: no answer: %w", method, path, len(body), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	a := answer{route: route, status: resp.StatusCode, body: raw, header: resp.Header}
	k.judge(&a)
	return a, nil
}

// dial connects to the participant as the kit's HTTP client would: TCP,
// with its TLS settings for https.
func (k *kit) dial(ctx context.Context, u *url.URL) (net.Conn, error) {
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil || u.Scheme != "https" {
		return conn, err
	}
	cfg := &tls.Config{}
	if tr, ok := k.hc.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		cfg = tr.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}
