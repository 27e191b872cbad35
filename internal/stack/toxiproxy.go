package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// ToxiproxyEnvVar names the Toxiproxy server binary (scripts/ensure-toxiproxy.sh
// prints it; `make test` and CI set it).
const ToxiproxyEnvVar = "TURNSTILE_TOXIPROXY_BIN"

// FindToxiproxy returns the Toxiproxy server binary: $TURNSTILE_TOXIPROXY_BIN,
// else bin/toxiproxy-server under project. The error says how to get one.
func FindToxiproxy(project string) (string, error) {
	if bin := os.Getenv(ToxiproxyEnvVar); bin != "" {
		return bin, nil
	}
	bin := filepath.Join(project, "bin", "toxiproxy-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no Toxiproxy server: set %s or run scripts/ensure-toxiproxy.sh (installs %s)", ToxiproxyEnvVar, bin)
	}
	return bin, nil
}

// Toxiproxy is a running Toxiproxy server and its API client: proxies on
// loopback addresses of their own, in front of the processes a test
// started, with toxics (latency, timeouts, resets, bandwidth) added and
// removed while traffic flows.
type Toxiproxy struct {
	Proc   *Proc
	API    string // host:port of its HTTP API
	Client *toxiproxy.Client
}

// StartToxiproxy starts the server bin on a free loopback port and waits
// until its API answers.
func (l *Launcher) StartToxiproxy(ctx context.Context, bin string, timeout time.Duration) (*Toxiproxy, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	p, err := l.Start("toxiproxy", bin, []string{"-host", "127.0.0.1", "-port", fmt.Sprint(port)})
	if err != nil {
		return nil, err
	}
	api := fmt.Sprintf("127.0.0.1:%d", port)
	if err := WaitFor(ctx, "toxiproxy API", p, timeout, func() bool { return Healthy("http://" + api + "/version") }); err != nil {
		p.Kill()
		return nil, err
	}
	return &Toxiproxy{Proc: p, API: api, Client: toxiproxy.NewClient(api)}, nil
}

// Proxy is one proxy: clients dial Listen and reach the upstream through
// it.
type Proxy struct {
	*toxiproxy.Proxy
	// URL is the upstream's base URL with Listen in place of its host:port
	// (for HTTP upstreams), or Listen itself.
	URL string
}

// Front creates a proxy named name on a free loopback port in front of
// upstream, a base URL (http://host:port[/path]) or a host:port.
func (tp *Toxiproxy) Front(name, upstream string) (*Proxy, error) {
	hostPort, rest, scheme := upstream, "", ""
	if i := strings.Index(upstream, "://"); i >= 0 {
		scheme = upstream[:i+3]
		hostPort = upstream[i+3:]
		if j := strings.IndexByte(hostPort, '/'); j >= 0 {
			hostPort, rest = hostPort[:j], hostPort[j:]
		}
	}
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return nil, fmt.Errorf("proxy %s: upstream %q: %w", name, upstream, err)
	}
	listen, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := tp.Client.CreateProxy(name, listen, hostPort)
	if err != nil {
		return nil, fmt.Errorf("proxy %s in front of %s: %w", name, upstream, err)
	}
	return &Proxy{Proxy: p, URL: scheme + p.Listen + rest}, nil
}

// Faults a test adds to a proxy. Each is a Toxiproxy toxic; stream
// "downstream" is the answers (upstream → client), "upstream" the requests.
const (
	// ToxicLatency delays data by latency ± jitter milliseconds.
	ToxicLatency = "latency"
	// ToxicTimeout stops all data and, with timeout 0, never closes the
	// connection: a hung (not refusing) server, or a half-open connection
	// when only one direction stops.
	ToxicTimeout = "timeout"
	// ToxicResetPeer resets the connection (TCP RST) after timeout ms.
	ToxicResetPeer = "reset_peer"
	// ToxicBandwidth limits the rate to rate KB/s.
	ToxicBandwidth = "bandwidth"
)

// Hang makes the proxy's upstream hang: no byte passes in either direction
// and no connection is closed, until the toxic is removed (Heal).
func (p *Proxy) Hang() error {
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.AddToxic("hang-"+stream, ToxicTimeout, stream, 1, toxiproxy.Attributes{"timeout": 0}); err != nil {
			return fmt.Errorf("hang %s: %w", p.Name, err)
		}
	}
	return nil
}

// Heal removes every toxic of the proxy.
func (p *Proxy) Heal() error {
	toxics, err := p.Toxics()
	if err != nil {
		return fmt.Errorf("toxics of %s: %w", p.Name, err)
	}
	var errs []error
	for _, t := range toxics {
		if err := p.RemoveToxic(t.Name); err != nil {
			errs = append(errs, fmt.Errorf("remove %s from %s: %w", t.Name, p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// SlowAndFlaky adds latency ± jitter to both directions and resets a share
// (toxicity, 0..1) of the connections after resetAfter: the slow link with
// resets of the crash matrix.
func (p *Proxy) SlowAndFlaky(latency, jitter, resetAfter time.Duration, toxicity float32) error {
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := p.AddToxic("latency-"+stream, ToxicLatency, stream, 1, toxiproxy.Attributes{
			"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds(),
		}); err != nil {
			return fmt.Errorf("latency on %s: %w", p.Name, err)
		}
	}
	if _, err := p.AddToxic("reset", ToxicResetPeer, "downstream", toxicity, toxiproxy.Attributes{"timeout": resetAfter.Milliseconds()}); err != nil {
		return fmt.Errorf("resets on %s: %w", p.Name, err)
	}
	return nil
}

// Reachable reports whether GET url answers within timeout (any status):
// for telling a hung link from a healthy one.
func Reachable(url string, timeout time.Duration) bool {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
