package stack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// probeInterval is how often a readiness condition is polled.
const probeInterval = 50 * time.Millisecond

// WaitFor polls cond until it holds, p (if not nil) ends, timeout passes or
// ctx is done. The error of an ended process carries its log's tail.
func WaitFor(ctx context.Context, what string, p *Proc, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s: %s exited (%v) before it was ready; log %s:\n%s", what, p.Name, err, p.Log, p.Tail(30))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(probeInterval):
		}
	}
	return nil
}

// FreePort is a loopback TCP port free at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as host:port.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// Healthy reports whether GET url answers 200.
func Healthy(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ReadyURL is the base URL a server wrote to its --ready-file, once it has.
func ReadyURL(file string) (string, bool) {
	data, err := os.ReadFile(file)
	if err != nil || len(data) == 0 {
		return "", false
	}
	return strings.TrimSpace(string(data)), true
}

// PolicyHealth is the health URL of a policy server whose base URL (with
// its /v1 suffix) is base.
func PolicyHealth(base string) string { return strings.TrimSuffix(base, "/v1") + "/healthz" }

// EnvHealth is the health URL of an environment server at base.
func EnvHealth(base string) string { return base + "/healthz" }
