// Package tlsfiles builds the TLS configurations of turnstile's HTTP
// endpoints (environment servers, the policy server) and of their clients
// (workers, the conformance kit) from PEM files named by flags or
// environment variables. TLS is optional: with no file named, servers
// listen on plain HTTP and clients trust the system roots.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
)

// Environment variables of the server side (flags --tls-cert, --tls-key,
// --tls-client-ca) and of the client side.
const (
	EnvCert     = "TURNSTILE_TLS_CERT"      // server certificate chain (PEM)
	EnvKey      = "TURNSTILE_TLS_KEY"       // server private key (PEM)
	EnvClientCA = "TURNSTILE_TLS_CLIENT_CA" // CA that signs client certificates: mutual TLS
	// EnvCA is the CA a client trusts for the servers it calls (instead of
	// the system roots).
	EnvCA = "TURNSTILE_TLS_CA"
	// EnvClientCert and EnvClientKey are a client's certificate for mutual
	// TLS.
	EnvClientCert = "TURNSTILE_TLS_CLIENT_CERT"
	EnvClientKey  = "TURNSTILE_TLS_CLIENT_KEY"
)

// ServerFiles names a server's TLS files; all empty means plain HTTP.
type ServerFiles struct {
	Cert, Key string
	// ClientCA, when set, turns on mutual TLS: every client must present a
	// certificate signed by it.
	ClientCA string
}

// AddFlags registers --tls-cert, --tls-key and --tls-client-ca on fs,
// defaulting to the environment variables (read through getenv).
func (f *ServerFiles) AddFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.Cert, "tls-cert", getenv(EnvCert), "serve HTTPS with this certificate chain (PEM); default from $"+EnvCert)
	fs.StringVar(&f.Key, "tls-key", getenv(EnvKey), "private key of --tls-cert (PEM); default from $"+EnvKey)
	fs.StringVar(&f.ClientCA, "tls-client-ca", getenv(EnvClientCA),
		"require client certificates signed by this CA (mutual TLS; needs --tls-cert); default from $"+EnvClientCA)
}

// Enabled reports whether any file is named.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Config loads the files; it returns nil for plain HTTP.
func (f ServerFiles) Config() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if f.ClientCA != "" {
		pool, err := loadPool(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Listen listens on addr (TCP) and, when cfg is not nil, serves TLS on the
// listener. It returns the listener and the URL scheme, "http://" or
// "https://".
func Listen(addr string, cfg *tls.Config) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	if cfg == nil {
		return ln, "http://", nil
	}
	return tls.NewListener(ln, cfg), "https://", nil
}

// ClientFiles names a client's TLS files; all empty means the system roots
// and no client certificate.
type ClientFiles struct {
	CA        string
	Cert, Key string // client certificate for mutual TLS
}

// ClientFilesFromEnv reads EnvCA, EnvClientCert and EnvClientKey through
// lookup.
func ClientFilesFromEnv(lookup func(string) (string, bool)) ClientFiles {
	get := func(k string) string {
		v, _ := lookup(k)
		return v
	}
	return ClientFiles{CA: get(EnvCA), Cert: get(EnvClientCert), Key: get(EnvClientKey)}
}

// Config loads the files; it returns nil when none is named.
func (f ClientFiles) Config() (*tls.Config, error) {
	if f.CA == "" && f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvCA, err)
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("a client certificate needs both %s and %s", EnvClientCert, EnvClientKey)
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// HTTPClient returns an http.Client with no overall timeout whose transport
// (a clone of http.DefaultTransport) uses cfg; nil cfg keeps the defaults.
func HTTPClient(cfg *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg != nil {
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: tr}
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
