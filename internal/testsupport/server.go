package testsupport

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
)

// QuietServer is a started test server of h that logs nothing of its own
// (a client a test hangs up on is no news); the caller closes it.
func QuietServer(h http.Handler) *httptest.Server {
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Start()
	return hs
}
