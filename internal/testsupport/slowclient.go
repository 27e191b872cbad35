package testsupport

import (
	"bufio"
	"errors"

	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// GiveUp is how long the slow-client checks wait for a server to close a
// connection before they call it held open: far longer than any timeout
// the tests configure, so a slow machine does not fail them, and far
// shorter than "forever", which is what a server without the timeout does.
const GiveUp = 20 * time.Second

// RequireIdleClosed makes one request on a keep-alive connection to addr
// (host:port; plain HTTP), reads the answer, then leaves the connection
// idle and requires the server to close it: a server without an idle
// timeout keeps it open, and the check fails after GiveUp. header is sent
// with the request ("Authorization: Bearer …", or empty).
func RequireIdleClosed(t testing.TB, addr, path, header string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if header != "" {
		req += header + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer of GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("GET %s answered %s with Connection: close; the check needs a keep-alive connection", path, resp.Status)
	}
	// Idle now: the next read ends when the server closes the connection.
	_ = conn.SetReadDeadline(time.Now().Add(GiveUp))
	n, err := br.Read(make([]byte, 1))
	if n == 0 && isTimeout(err) {
		t.Fatalf("an idle keep-alive connection to %s was still open after %s", addr, GiveUp)
	}
	if n > 0 {
		t.Fatalf("the server sent data on an idle connection")
	}
}

// RequireTrickleCutOff sends POST path to addr with a body announced as
// 1 MiB and then trickled one byte every 100 ms (a request that would take
// more than a day), and requires the server to end the request: an answer
// or a closed connection before GiveUp. header is sent with the request.
func RequireTrickleCutOff(t testing.TB, addr, path, header string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	req := "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n"
	if header != "" {
		req += header + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n{"); err != nil {
		t.Fatalf("write request: %v", err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(GiveUp))
	_, err = io.Copy(io.Discard, conn)
	if isTimeout(err) {
		t.Fatalf("a body trickled to %s%s was still being read after %s", addr, path, GiveUp)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// FreeAddr returns a loopback address no one listens on right now, for a
// setting that takes an address and reports none back.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// HostPort is the host:port of a base URL (http://127.0.0.1:8091/v1 →
// 127.0.0.1:8091).
func HostPort(base string) string {
	rest := base[strings.Index(base, "://")+3:]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(rest)
}
