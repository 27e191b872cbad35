package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/trainer"
)

// OpenAPI is the gateway's OpenAPI 3 document, served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Backend is what the gateway needs of turnstile: *trainer.Client is one, a
// fake is another (tests).
type Backend interface {
	Submit(ctx context.Context, r trainer.SubmitRequest) (trainer.SubmitResult, error)
	Summary(ctx context.Context, set string) (trainer.SetSummary, error)
	CountRuns(ctx context.Context, set string) (int, error)
	Health(ctx context.Context, r trainer.HealthRequest) (trainer.Health, error)
	ResultsPage(ctx context.Context, set string, token []byte, size int) ([]trainer.RolloutRecord, []byte, error)
	Export(ctx context.Context, set string, store trainer.TranscriptReader, w io.Writer) (trainer.ExportStats, error)
	Feed(ctx context.Context, store trainer.TranscriptReader, r trainer.FeedRequest) (trainer.FeedPage, error)
	Acknowledge(ctx context.Context, r trainer.AckRequest) (trainer.AckSummary, error)
	Staleness(ctx context.Context, r trainer.StalenessRequest) (trainer.StalenessResult, error)
	StartCheckpoint(ctx context.Context, r trainer.CheckpointRequest, requestID string) (trainer.Started, bool, error)
	StartRestore(ctx context.Context, r trainer.RestoreRequest, requestID string) (trainer.Started, bool, error)
	CoordinatorStatus(ctx context.Context, workflowID string, result any) (trainer.CoordinatorRun, error)
	Resume(ctx context.Context, r trainer.ResumeRequest) (trainer.ResumeSummary, error)
}

// Config configures a Server.
type Config struct {
	// Token is the bearer token every /v1 route but the OpenAPI document
	// asks for; empty is refused unless InsecureNoAuth.
	Token          string
	InsecureNoAuth bool
	// CheckpointRoot is the directory checkpoints go under (the workers'
	// view of it); empty refuses checkpoints and restores.
	CheckpointRoot string
	// Transcripts reads trajectories (the workers' transcript directory);
	// nil refuses the feed and the export.
	Transcripts trainer.TranscriptReader
	// ControlToken is the environment servers' control token, for resumes;
	// empty refuses resumes.
	ControlToken string
	// StallWindow is the watchdog's window (default DefaultStallWindow).
	StallWindow time.Duration
	// FeedSettle delays a finished rollout in the feed until its
	// visibility record has surely landed (default DefaultFeedSettle).
	FeedSettle time.Duration
	// PollInterval is how often a waiting feed looks again (default
	// DefaultPollInterval).
	PollInterval time.Duration
	Logger       *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultStallWindow  = 5 * time.Minute
	DefaultFeedSettle   = time.Second
	DefaultPollInterval = 500 * time.Millisecond
	// maxBody bounds a request body (inline dataset rows included).
	maxBody = 64 << 20
)

// Server serves the gateway's routes over a Backend.
type Server struct {
	cfg     Config
	backend Backend
	token   [32]byte
	mux     *http.ServeMux
}

// New returns a server over backend. A config without a token is refused
// unless it disables authentication explicitly.
func New(cfg Config, backend Backend) (*Server, error) {
	if cfg.Token == "" && !cfg.InsecureNoAuth {
		return nil, errors.New("a bearer token is required (or disable authentication explicitly, for local use only)")
	}
	if cfg.Token != "" && cfg.Token != strings.TrimSpace(cfg.Token) {
		return nil, errors.New("the bearer token has leading or trailing whitespace")
	}
	if cfg.StallWindow <= 0 {
		cfg.StallWindow = DefaultStallWindow
	}
	if cfg.FeedSettle < 0 {
		return nil, errors.New("feed settle time must not be negative")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, backend: backend, token: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux()}
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: "no route " + r.Method + " " + r.URL.Path})
	})
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// route is one route: its method and pattern (net/http syntax), its
// handler, whether it needs the bearer token, and every status it answers
// (the OpenAPI document lists exactly these; a test checks both ways).
type route struct {
	method, pattern string
	handle          func(w http.ResponseWriter, r *http.Request) error
	open            bool
	statuses        []int
}

// Status sets of the routes.
var (
	ok200, ok202 = http.StatusOK, http.StatusAccepted
	badReq       = http.StatusBadRequest
	unauth       = http.StatusUnauthorized
	notFound     = http.StatusNotFound
	conflict     = http.StatusConflict
	unavail      = http.StatusServiceUnavailable
)

func (s *Server) routes() []route {
	return []route{
		{method: "GET", pattern: "/healthz", handle: s.healthz, open: true, statuses: []int{ok200}},
		{method: "GET", pattern: "/v1/openapi.json", handle: s.openapi, open: true, statuses: []int{ok200}},
		{method: "POST", pattern: "/v1/sets", handle: s.submit, statuses: []int{ok200, badReq, unauth, conflict, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}", handle: s.getSet, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/results", handle: s.results, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/export", handle: s.export, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/feed", handle: s.feed, statuses: []int{ok200, badReq, unauth, notFound, conflict, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/acks", handle: s.acks, statuses: []int{ok200, badReq, unauth, notFound, conflict, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/policy_version", handle: s.policyVersion, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/checkpoints", handle: s.startCheckpoint, statuses: []int{ok202, badReq, unauth, conflict, unavail}},
		{method: "GET", pattern: "/v1/checkpoints/{id}", handle: s.getCheckpoint, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/restores", handle: s.startRestore, statuses: []int{ok202, badReq, unauth, conflict, unavail}},
		{method: "GET", pattern: "/v1/restores/{id}", handle: s.getRestore, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/resumes", handle: s.resume, statuses: []int{ok200, badReq, unauth, unavail}},
	}
}

// wrap authenticates (unless the route is open), bounds the body and turns
// a handler's error into its JSON answer.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rt.open && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="turnstile"`)
			writeError(w, &apiError{status: unauth, code: CodeUnauthorized, msg: "missing or wrong bearer token (Authorization: Bearer <token>)"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := rt.handle(w, r); err != nil {
			ae := toAPIError(err)
			if ae.status >= 500 {
				s.cfg.Logger.Warn("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
			}
			writeError(w, ae)
		}
	})
}

// authorized compares the bearer token in constant time (digests of equal
// length, so not even the token's length leaks).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.InsecureNoAuth {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, HealthzResponse{OK: true})
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(OpenAPI)
	return err
}
