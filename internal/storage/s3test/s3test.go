// Package s3test starts a real S3-compatible server for tests: Versity's
// S3 gateway (versitygw) over a temporary directory, on a free loopback
// port. Never an in-process fake: the tests see what a real object store
// answers.
//
// The binary is found as $TURNSTILE_VERSITYGW_BIN, then <project>/bin/versitygw
// (scripts/ensure-versitygw.sh installs the pinned version there), then
// versitygw on PATH. Without it, Start skips the test and says how to get it.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvBin names the versitygw binary to use.
const EnvBin = "TURNSTILE_VERSITYGW_BIN"

// Credentials the test server accepts; they are only ever used on loopback.
const (
	AccessKey = "turnstile-test-access"
	SecretKey = "turnstile-test-secret"
	Region    = "us-east-1"
)

// Server is a running versitygw.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// Root is the directory the gateway serves: one subdirectory per
	// bucket, one file per object (tests corrupt objects there).
	Root string
	log  string
}

// Binary returns the path of a versitygw binary, or "" when there is none.
func Binary() string {
	if p := os.Getenv(EnvBin); p != "" {
		return p
	}
	if root, err := projectRoot(); err == nil {
		p := filepath.Join(root, "bin", "versitygw")
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	return ""
}

// projectRoot is the directory holding go.mod, from the working directory
// up.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start starts a gateway for the test and stops it (by PID) at cleanup. It
// skips the test when no binary can be had.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skipf("no versitygw binary: run scripts/ensure-versitygw.sh (installs the pinned version into ./bin) or set %s", EnvBin)
	}
	dir := t.TempDir()
	s := &Server{Root: filepath.Join(dir, "data"), log: filepath.Join(dir, "versitygw.log")}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--access", AccessKey, "--secret", SecretKey,
		"--port", fmt.Sprintf("127.0.0.1:%d", port), "posix", s.Root)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("---- versitygw log ----\n%s", s.Tail())
		}
	})
	s.waitReady(t, done)
	return s
}

// waitReady polls the endpoint until the gateway answers HTTP.
func (s *Server) waitReady(t testing.TB, done chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("versitygw exited before it was ready (%v):\n%s", err, s.Tail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw not ready after 30s: %v\n%s", err, s.Tail())
		}
		time.Sleep(50 * time.Millisecond) // readiness polling interval
	}
}

// Tail is the end of the gateway's log.
func (s *Server) Tail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Bucket creates a bucket (a directory of the posix backend) and returns
// its location URL with prefix as its key prefix (may be empty).
func (s *Server) Bucket(t testing.TB, name, prefix string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(s.Root, name), 0o755); err != nil {
		t.Fatal(err)
	}
	loc := "s3://" + name
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		loc += "/" + prefix
	}
	return loc + "?endpoint=" + s.Endpoint + "&region=" + Region + "&use_path_style=true"
}

// Env are the environment entries a process needs to reach the gateway
// (the AWS SDK's credential chain reads them).
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// SetEnv sets Env in this process for the test (not with t.Parallel).
func (s *Server) SetEnv(t *testing.T) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// ObjectPath is the file holding object key of bucket on the gateway's
// disk.
func (s *Server) ObjectPath(bucket, key string) string {
	return filepath.Join(s.Root, bucket, filepath.FromSlash(key))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
