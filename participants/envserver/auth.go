package envserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// bearer is one plane's token. Only its SHA-256 is kept: comparing digests
// in constant time leaks neither the token nor its length.
type bearer struct {
	sum [32]byte
	set bool
}

func newBearer(token string) bearer {
	return bearer{sum: sha256.Sum256([]byte(token)), set: token != ""}
}

// matches reports whether r carries "Authorization: Bearer <token>".
func (b bearer) matches(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(tok))
	return ok && b.set && subtle.ConstantTimeCompare(sum[:], b.sum[:]) == 1
}

// Realms of the WWW-Authenticate challenge of each plane.
const (
	realmData    = `Bearer realm="turnstile-data"`
	realmControl = `Bearer realm="turnstile-control"`
)

// checkTokens refuses a configuration that would leave the data plane open
// by accident or let one token open both planes.
func checkTokens(cfg ServerConfig) error {
	switch {
	case cfg.DataToken == "" && !cfg.InsecureNoDataAuth:
		return errors.New("no data-plane token: set one (--data-token or $" + protocol.DataTokenEnvVar +
			"), or run unauthenticated on purpose (--insecure-no-data-auth)")
	case cfg.DataToken != "" && cfg.InsecureNoDataAuth:
		return errors.New("a data-plane token and --insecure-no-data-auth exclude each other")
	case cfg.DataToken != "" && cfg.DataToken == cfg.ControlToken:
		return errors.New("the data-plane and control-plane tokens are equal: the data token would open the control plane")
	}
	return nil
}

// isDataPlane says whether r belongs to the data plane: everything but the
// health probe and the control plane. It is decided on the route the
// server's router picks for r (its pattern), not on the decoded path: the
// router matches the escaped path, so "/v1%2Fcontrol/x" is no control
// route, and must not skip the data token as if it were one.
func (s *Server) isDataPlane(r *http.Request) bool {
	_, pattern := s.mux.Handler(r)
	if pattern == "" {
		// No route (a redirect or a 405): judge the escaped path, which is
		// what the router saw.
		pattern = r.URL.EscapedPath()
	}
	_, path, _ := strings.Cut(pattern, " ")
	if path == "" {
		path = pattern
	}
	return path != "/healthz" && !strings.HasPrefix(path, protocol.ControlPrefix) && path != strings.TrimSuffix(protocol.ControlPrefix, "/")
}

// authorizeData answers 401 and reports false when a data-plane request
// lacks the data token. The refusal is not counted in Stats: an
// unauthenticated caller changes nothing, not even a counter.
func (s *Server) authorizeData(w http.ResponseWriter, r *http.Request) bool {
	if s.dataOpen || !s.isDataPlane(r) || s.dataToken.matches(r) {
		return true
	}
	w.Header().Set("WWW-Authenticate", realmData)
	writeErrorBody(w, http.StatusUnauthorized, protocol.ErrorDetail{Code: protocol.CodeUnauthorized,
		Message: "missing or wrong bearer token for the data plane"})
	return false
}
