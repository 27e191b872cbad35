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

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
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
	HasAdmission(ctx context.Context, set string) (bool, error)
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
	SetMaxInFlight(ctx context.Context, set string, n int) (trainer.AdmissionStatus, error)
	StartWatchdog(ctx context.Context, set string, a trainer.AutoRecover) (trainer.Started, error)
	StopWatchdog(ctx context.Context, set string) error
	WatchdogStatus(ctx context.Context, set string) (checkpoint.WatchdogStatus, bool, error)
	CreateSchedule(ctx context.Context, r trainer.ScheduleRequest) (string, error)
	DescribeSchedule(ctx context.Context, set string) (trainer.Schedule, error)
	SetScheduleTag(ctx context.Context, set, tag string) error
	PauseSchedule(ctx context.Context, set, note string) error
	UnpauseSchedule(ctx context.Context, set, note string) error
	TriggerSchedule(ctx context.Context, set string) error
	DeleteSchedule(ctx context.Context, set string) error
}

// Config configures a Server.
type Config struct {
	// Token is the trainer role's bearer token: every /v1 route but the
	// OpenAPI document and the operator routes asks for it (or the operator
	// token); empty is refused unless InsecureNoAuth.
	Token string
	// OperatorToken is the operator role's bearer token: checkpoints,
	// restores and resumes ask for it, and it opens the trainer routes too.
	// Empty: no one may use the operator routes (403).
	OperatorToken  string
	InsecureNoAuth bool
	// CheckpointRoot is the directory checkpoints go under (the workers'
	// view of it); empty refuses checkpoints and restores.
	CheckpointRoot string
	// Pin pins the committed checkpoints of a set whose tag (or id) is tag
	// under the checkpoint root, so retention never deletes them, and
	// returns their ids (retention.ErrNothingToPin when none has it); nil
	// refuses pins.
	Pin func(ctx context.Context, set, tag string) ([]string, error)
	// Transcripts reads trajectories (the workers' transcript directory);
	// nil refuses the feed and the export.
	Transcripts trainer.TranscriptReader
	// ControlToken is the environment servers' control token, for resumes;
	// empty refuses resumes.
	ControlToken string
	// Destinations is where the gateway lets a request point the workers
	// (environment servers, model endpoints, participants) and where it
	// sends the control token itself (resumes): the workers' own settings.
	// A request naming anything else is a 400 naming the setting. Nil
	// admits nothing a request names.
	Destinations *destination.Config
	// DatasetRoot is the directory dataset_path resolves in; empty refuses
	// dataset_path. DatasetMaxBytes caps a dataset file (default
	// DefaultDatasetMaxBytes).
	DatasetRoot     string
	DatasetMaxBytes int64
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
	// WriteTimeout is the HTTP server's write timeout (0: none). The feed
	// moves its write deadline to the end of its wait plus this, and the
	// export moves it on with every line it writes, so a long poll or a
	// long export is not cut off by a timeout meant for quick answers.
	WriteTimeout time.Duration
}

// Defaults of Config.
const (
	DefaultStallWindow  = 5 * time.Minute
	DefaultFeedSettle   = time.Second
	DefaultPollInterval = 500 * time.Millisecond
	// maxBody bounds a request body (inline dataset rows included).
	maxBody = 64 << 20
	// DefaultDatasetMaxBytes caps a dataset_path file.
	DefaultDatasetMaxBytes = 256 << 20
)

// Server serves the gateway's routes over a Backend.
type Server struct {
	cfg     Config
	backend Backend
	// tokens are the digests of the roles' tokens (a role without a token
	// has none).
	tokens map[Role][32]byte
	mux    *http.ServeMux
	// healths are the sets' recent health, for feed pages.
	healths healthCache
	// known are the sets found to exist.
	known knownSets
}

// New returns a server over backend. A config without a token is refused
// unless it disables authentication explicitly.
func New(cfg Config, backend Backend) (*Server, error) {
	if err := checkTokens(cfg); err != nil {
		return nil, err
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
	// ControlToken is the global control token; a named server's own
	// comes from Destinations.
	dest := destination.Config{}
	if cfg.Destinations != nil {
		dest = *cfg.Destinations
	}
	dest.ControlToken = cfg.ControlToken
	cfg.Destinations = &dest
	if cfg.DatasetMaxBytes <= 0 {
		cfg.DatasetMaxBytes = DefaultDatasetMaxBytes
	}
	s := &Server{cfg: cfg, backend: backend, tokens: map[Role][32]byte{}, mux: http.NewServeMux()}
	for role, tok := range map[Role]string{RoleTrainer: cfg.Token, RoleOperator: cfg.OperatorToken} {
		if tok != "" {
			s.tokens[role] = sha256.Sum256([]byte(tok))
		}
	}
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

// checkTokens refuses a configuration whose tokens cannot work.
func checkTokens(cfg Config) error {
	switch {
	case cfg.Token == "" && !cfg.InsecureNoAuth:
		return errors.New("a bearer token is required (or disable authentication explicitly, for local use only)")
	case cfg.Token != strings.TrimSpace(cfg.Token):
		return errors.New("the bearer token has leading or trailing whitespace")
	case cfg.OperatorToken != strings.TrimSpace(cfg.OperatorToken):
		return errors.New("the operator token has leading or trailing whitespace")
	case cfg.OperatorToken != "" && cfg.OperatorToken == cfg.Token:
		return errors.New("the operator token equals the trainer token: give each role its own")
	case cfg.Token != "" && cfg.Token == cfg.ControlToken:
		return errors.New("the bearer token equals the environment servers' control token: a trainer would hold the control plane")
	case cfg.OperatorToken != "" && cfg.OperatorToken == cfg.ControlToken:
		return errors.New("the operator token equals the environment servers' control token: give the gateway's roles tokens of their own")
	}
	return nil
}

// Role is what a token may do. The operator role opens every route; the
// trainer role every route but the operator's.
type Role string

// Roles.
const (
	RoleTrainer  Role = "trainer"
	RoleOperator Role = "operator"
)

// route is one route: its method and pattern (net/http syntax), its
// handler, whether it needs no token and else the role it needs, and every
// status it answers (the OpenAPI document lists exactly these, and the
// role; a test checks both ways).
type route struct {
	method, pattern string
	handle          func(w http.ResponseWriter, r *http.Request) error
	open            bool
	role            Role
	statuses        []int
}

// Status sets of the routes.
var (
	ok200, ok202 = http.StatusOK, http.StatusAccepted
	badReq       = http.StatusBadRequest
	unauth       = http.StatusUnauthorized
	forbidden    = http.StatusForbidden
	notFound     = http.StatusNotFound
	conflict     = http.StatusConflict
	unavail      = http.StatusServiceUnavailable
)

func (s *Server) routes() []route {
	const t, o = RoleTrainer, RoleOperator
	return []route{
		{method: "GET", pattern: "/healthz", handle: s.healthz, open: true, statuses: []int{ok200}},
		{method: "GET", pattern: "/v1/openapi.json", handle: s.openapi, open: true, statuses: []int{ok200}},
		{method: "POST", pattern: "/v1/sets", handle: s.submit, role: t, statuses: []int{ok200, badReq, unauth, conflict, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}", handle: s.getSet, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/results", handle: s.results, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/export", handle: s.export, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/feed", handle: s.feed, role: t, statuses: []int{ok200, badReq, unauth, notFound, conflict, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/acks", handle: s.acks, role: t, statuses: []int{ok200, badReq, unauth, notFound, conflict, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/max_in_flight", handle: s.maxInFlight, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/policy_version", handle: s.policyVersion, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/checkpoints", handle: s.startCheckpoint, role: o, statuses: []int{ok202, badReq, unauth, forbidden, conflict, unavail}},
		{method: "GET", pattern: "/v1/checkpoints/{id}", handle: s.getCheckpoint, role: o, statuses: []int{ok200, badReq, unauth, forbidden, notFound, unavail}},
		{method: "POST", pattern: "/v1/restores", handle: s.startRestore, role: o, statuses: []int{ok202, badReq, unauth, forbidden, conflict, unavail}},
		{method: "GET", pattern: "/v1/restores/{id}", handle: s.getRestore, role: o, statuses: []int{ok200, badReq, unauth, forbidden, notFound, unavail}},
		{method: "POST", pattern: "/v1/resumes", handle: s.resume, role: o, statuses: []int{ok200, badReq, unauth, forbidden, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/watchdog", handle: s.startWatchdog, role: o, statuses: []int{ok202, badReq, unauth, forbidden, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/watchdog", handle: s.getWatchdog, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "DELETE", pattern: "/v1/sets/{set}/watchdog", handle: s.stopWatchdog, role: o, statuses: []int{ok200, badReq, unauth, forbidden, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/schedule", handle: s.createSchedule, role: o, statuses: []int{ok200, badReq, unauth, forbidden, conflict, unavail}},
		{method: "GET", pattern: "/v1/sets/{set}/schedule", handle: s.getSchedule, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "DELETE", pattern: "/v1/sets/{set}/schedule", handle: s.deleteSchedule, role: o, statuses: []int{ok200, badReq, unauth, forbidden, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/schedule/tag", handle: s.tagSchedule, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/schedule/pause", handle: s.pauseSchedule, role: o, statuses: []int{ok200, badReq, unauth, forbidden, notFound, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/schedule/unpause", handle: s.unpauseSchedule, role: o, statuses: []int{ok200, badReq, unauth, forbidden, notFound, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/pins", handle: s.pin, role: t, statuses: []int{ok200, badReq, unauth, notFound, unavail}},
		{method: "POST", pattern: "/v1/sets/{set}/schedule/trigger", handle: s.triggerSchedule, role: o, statuses: []int{ok200, badReq, unauth, forbidden, notFound, unavail}},
	}
}

// wrap authenticates and checks the role (unless the route is open),
// bounds the body and turns a handler's error into its JSON answer. A
// refused request is answered before its body is read: it changes nothing.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rt.open {
			if e := s.admit(r, rt.role); e != nil {
				if e.status == unauth {
					w.Header().Set("WWW-Authenticate", `Bearer realm="turnstile"`)
				}
				writeError(w, e)
				return
			}
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

// extendWrite moves the write deadline of w's connection to the write
// timeout after wait from now: for an answer that may legitimately come
// later than the timeout allows (a long poll, a stream making progress).
func (s *Server) extendWrite(w http.ResponseWriter, wait time.Duration) {
	if s.cfg.WriteTimeout > 0 {
		httpserver.ExtendWrite(w, time.Now().Add(max(wait, 0)+s.cfg.WriteTimeout))
	}
}

// admit answers nil when r's token holds the role a route needs: 401 for
// a missing or wrong token, 403 for a token of a role that may not.
func (s *Server) admit(r *http.Request, need Role) *apiError {
	if s.cfg.InsecureNoAuth {
		return nil
	}
	role, ok := s.roleOf(r)
	switch {
	case !ok:
		return &apiError{status: unauth, code: CodeUnauthorized, msg: "missing or wrong bearer token (Authorization: Bearer <token>)"}
	case need == RoleOperator && role != RoleOperator:
		return &apiError{status: forbidden, code: CodeForbidden, msg: "this route needs the operator role: send the operator token (the gateway's --operator-token); the trainer token cannot checkpoint, restore, resume, or start, change or stop automatic recovery or a checkpoint schedule"}
	}
	return nil
}

// roleOf is the role whose token r carries, compared in constant time
// against every role's (digests of equal length, so not even a token's
// length leaks).
func (s *Server) roleOf(r *http.Request) (Role, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	var found Role
	for _, role := range []Role{RoleTrainer, RoleOperator} {
		want, has := s.tokens[role]
		if has && subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
			found = role
		}
	}
	return found, found != ""
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
