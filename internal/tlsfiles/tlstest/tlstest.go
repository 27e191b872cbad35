// Package tlstest generates a throw-away certificate authority, a server
// certificate for the loopback addresses and a client certificate, written
// as PEM files into a test's temporary directory, for tests of TLS and
// mutual TLS.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files are the PEM files of one generated set.
type Files struct {
	CA                    string // the CA certificate (trust anchor of both sides)
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // a client certificate signed by CA
	OtherCA               string // an unrelated CA: trusting it must fail
	OtherCert, OtherKey   string // a client certificate signed by OtherCA
}

// New writes a fresh set into t.TempDir().
func New(t testing.TB) Files {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := authority(t, "turnstile test CA")
	other, otherKey := authority(t, "unrelated CA")
	f := Files{
		CA:      writeCert(t, dir, "ca.pem", ca),
		OtherCA: writeCert(t, dir, "other-ca.pem", other),
	}
	f.ServerCert, f.ServerKey = leaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	f.OtherCert, f.OtherKey = leaf(t, dir, "other-client", other, otherKey, x509.ExtKeyUsageClientAuth)
	return f
}

func template(t testing.TB, cn string) *x509.Certificate {
	t.Helper()
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func authority(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tpl := template(t, cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (certPath, keyPath string) {
	t.Helper()
	key := newKey(t)
	tpl := template(t, name)
	tpl.KeyUsage = x509.KeyUsageDigitalSignature
	tpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	if usage == x509.ExtKeyUsageServerAuth {
		tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		tpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create %s certificate: %v", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath = writePEM(t, dir, name+".pem", "CERTIFICATE", der)
	keyPath = writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	return certPath, keyPath
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writeCert(t testing.TB, dir, name string, c *x509.Certificate) string {
	return writePEM(t, dir, name, "CERTIFICATE", c.Raw)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
