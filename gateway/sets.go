package gateway

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	setpkg "github.com/turnstile-rl/turnstile/workflows/set"
)

// submit is POST /v1/sets.
func (s *Server) submit(w http.ResponseWriter, r *http.Request) error {
	var req SubmitRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	cr, err := s.submitRequest(r.Context(), req)
	if err != nil {
		return err
	}
	res, err := s.backend.Submit(r.Context(), cr)
	s.healths.drop(req.Set)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, SubmitResponse{
		Set: req.Set, RequestID: req.RequestID, Rollouts: len(res.Inputs), Started: res.Started, Existing: res.Existing,
		MaxInFlight: res.MaxInFlight,
	})
}

// submitRequest checks req and turns it into the client library's request;
// every error is a 400 naming the field. A server or endpoint the workers'
// settings do not admit is refused here, before anything starts.
func (s *Server) submitRequest(ctx context.Context, req SubmitRequest) (trainer.SubmitRequest, error) {
	if err := checkRequestID(req.RequestID); err != nil {
		return trainer.SubmitRequest{}, err
	}
	modes := 0
	for _, set := range []bool{len(req.Envs) > 0 || req.Count != 0, len(req.Rows) > 0, req.DatasetPath != ""} {
		if set {
			modes++
		}
	}
	if modes != 1 {
		return trainer.SubmitRequest{}, badRequest("", "give exactly one of envs+count, rows or dataset_path")
	}
	cr := trainer.SubmitRequest{
		Set: req.Set, Count: req.Count, Sampling: req.Sampling, Envs: req.Envs, EnvServer: req.EnvServer, EnvURL: req.EnvURL,
		Policy: req.Policy, PolicyEndpoint: req.PolicyEndpoint, ModelURL: req.ModelURL, Seed: req.Seed, MaxTurns: req.MaxTurns,
		RequireAck: req.RequireAck == nil || *req.RequireAck, Rows: req.Rows, Repeats: req.Repeats, RequestID: req.RequestID,
		MaxInFlight: req.MaxInFlight, ProgressEvery: progressEvery(s.cfg.StallWindow),
	}
	if err := setLimits(&cr, req.Limits); err != nil {
		return trainer.SubmitRequest{}, err
	}
	if req.DatasetPath != "" {
		rows, err := s.readDataset(ctx, req.DatasetPath)
		if err != nil {
			return trainer.SubmitRequest{}, err
		}
		cr.Rows = rows
	}
	if len(cr.Rows) > 0 && cr.Repeats == 0 {
		cr.Repeats = 1
	}
	if err := s.declare(ctx, &cr); err != nil {
		return trainer.SubmitRequest{}, err
	}
	if err := cr.Validate(); err != nil {
		var de *trainer.DatasetError
		if req.DatasetPath != "" && errors.As(err, &de) {
			return trainer.SubmitRequest{}, badRequest("dataset_path", fmt.Sprintf("dataset_path %q: %s", req.DatasetPath, de.Summary()))
		}
		return trainer.SubmitRequest{}, invalid(err, nil)
	}
	if err := s.checkSubmitDestinations(cr, req.DatasetPath != ""); err != nil {
		return trainer.SubmitRequest{}, err
	}
	return cr, nil
}

// checkSubmitDestinations refuses a server or endpoint a submission names
// that the workers' settings do not admit: the workers would refuse it
// anyway, one failed rollout at a time. A dataset file's rows are refused
// by line, without repeating what the file holds.
func (s *Server) checkSubmitDestinations(cr trainer.SubmitRequest, fromFile bool) error {
	d := s.cfg.Destinations
	if cr.EnvServer != "" || cr.EnvURL != "" {
		if _, err := d.Env(cr.EnvServer, cr.EnvURL); err != nil {
			return badRequest(pick(cr.EnvServer != "", "env_server", "env_url"), err.Error())
		}
	}
	if cr.PolicyEndpoint != "" || cr.ModelURL != "" {
		if _, err := d.Model(cr.PolicyEndpoint, cr.ModelURL); err != nil {
			return badRequest(pick(cr.PolicyEndpoint != "", "policy_endpoint", "model_url"), err.Error())
		}
	}
	for i, row := range cr.Rows {
		p := row.Policy
		if p == nil || (p.Endpoint == "" && p.BaseURL == "") {
			continue
		}
		_, err := d.Model(p.Endpoint, p.BaseURL)
		var re *destination.RefusedError
		switch {
		case err == nil:
		case fromFile && errors.As(err, &re):
			return badRequest("dataset_path", fmt.Sprintf("dataset_path: line %d: field policy names a model endpoint the workers do not admit (%s, or %s)",
				row.Line, destination.EnvModelEndpoints, destination.EnvAllowedModelURLs))
		default:
			return badRequest(fmt.Sprintf("rows[%d].policy", i), fmt.Sprintf("rows[%d].policy: %v", i, err))
		}
	}
	return nil
}

// declare admits the environments of cr's rows that the catalog does not
// hold when the environment server cr names declares them: the gateway asks
// its capabilities with the control token it holds (the data tokens stay
// the workers'). A refusal names the environment and the server.
func (s *Server) declare(ctx context.Context, cr *trainer.SubmitRequest) error {
	foreign := cr.ForeignEnvs()
	if len(foreign) == 0 || (cr.EnvServer == "" && cr.EnvURL == "") {
		return nil // Validate refuses what the catalog does not hold, as before
	}
	field := pick(cr.EnvURL != "", "env_url", "env_server")
	d := s.cfg.Destinations
	if d == nil {
		d = &destination.Config{}
	}
	target, err := d.EnvControl(cr.EnvServer, cr.EnvURL)
	if err != nil {
		return badRequest(field, err.Error())
	}
	server := fmt.Sprintf("%s (%s)", pick(cr.EnvServer != "", cr.EnvServer, cr.EnvURL), target.URL)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	caps, err := protocol.NewControlClient(target.URL, cmp.Or(target.Secret, s.cfg.ControlToken), nil).Capabilities(ctx)
	if err != nil {
		return badRequest(field, fmt.Sprintf("environment %s is not in the catalog; ask environment server %s for its environments: %v", foreign[0], server, err))
	}
	specs := make([]envs.Spec, len(caps.Envs))
	for i, e := range caps.Envs {
		specs[i] = envs.Spec{Name: e.Name, Mode: e.Mode, Style: e.Style}
	}
	if err := trainer.CheckDeclared(cr, server, specs); err != nil {
		return badRequest(field, err.Error())
	}
	return nil
}

func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// setLimits copies the budgets of a request.
func setLimits(cr *trainer.SubmitRequest, l *SubmitLimits) error {
	if l == nil {
		return nil
	}
	var err error
	if cr.ModelCallTimeout, err = duration("limits.model_call_timeout", l.ModelCallTimeout); err != nil {
		return err
	}
	if cr.EnvCallTimeout, err = duration("limits.env_call_timeout", l.EnvCallTimeout); err != nil {
		return err
	}
	if cr.Deadline, err = duration("limits.deadline", l.Deadline); err != nil {
		return err
	}
	cr.ModelCallRetries = l.ModelCallRetries
	return nil
}

// getSet is GET /v1/sets/{set}.
func (s *Server) getSet(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	sum, err := s.backend.Summary(r.Context(), set)
	if err != nil {
		return err
	}
	if sum.Overall.Rollouts == 0 {
		if err := s.knownSet(r, set); err != nil {
			return err
		}
	}
	h, err := s.health(r, set)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, SetResponse{Set: set, Overall: sum.Overall, ByEnv: sum.ByEnv, Health: h})
}

// noSet is the 404 of a set with neither rollouts nor an admission.
func noSet(set string) *apiError {
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, field: "set",
		msg: fmt.Sprintf("set %q has no rollouts (a submission shows in visibility a moment after it returns)", set)}
}

// requireSet answers 404 unless set has runs or an admission.
func (s *Server) requireSet(r *http.Request, set string) error {
	n, err := s.backend.CountRuns(r.Context(), set)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.knownSet(r, set)
	}
	return nil
}

// requireSetOnce is requireSet for acknowledgements: a set found once is
// remembered (knownSets). requireSet counts the set's runs in visibility,
// a pass over the whole set, which a trainer acknowledging page after page
// would otherwise pay for every page; a receipt of a rollout the set no
// longer has is refused by the acknowledgement itself (409).
func (s *Server) requireSetOnce(r *http.Request, set string) error {
	if s.known.has(set) {
		return nil
	}
	if err := s.requireSet(r, set); err != nil {
		return err
	}
	s.known.add(set)
	return nil
}

// knownSet answers 404 unless set has an admission (running or closed): a
// set just submitted may have no rollout in visibility yet, as its
// admission starts them a moment after the submission returns.
func (s *Server) knownSet(r *http.Request, set string) error {
	ok, err := s.backend.HasAdmission(r.Context(), set)
	if err != nil {
		return err
	}
	if !ok {
		return noSet(set)
	}
	return nil
}

// results is GET /v1/sets/{set}/results.
func (s *Server) results(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	size, err := queryInt(r, "page_size", 100, 1, trainer.MaxResultsPage)
	if err != nil {
		return err
	}
	token, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("page_token"))
	if err != nil {
		return badRequest("page_token", "page_token is not one this gateway handed out")
	}
	if len(token) == 0 {
		if err := s.requireSet(r, set); err != nil {
			return err
		}
	}
	recs, next, err := s.backend.ResultsPage(r.Context(), set, token, size)
	if err != nil {
		return err
	}
	out := ResultsResponse{Results: make([]ResultRecord, 0, len(recs)), NextPageToken: base64.RawURLEncoding.EncodeToString(next)}
	for _, rec := range recs {
		rr := ResultRecord{RolloutID: rec.RolloutID, Status: rec.Outcome(), Held: !rec.Closed() && rec.Result != nil,
			Attempt: int(rec.Attempt), Env: rec.Env, Result: rec.Result, Failure: rec.Err}
		out.Results = append(out.Results, rr)
	}
	return writeJSON(w, http.StatusOK, out)
}

// export is GET /v1/sets/{set}/export: NDJSON streamed as it is built. An
// error after the first line aborts the response (the client sees a
// truncated body, never a partial export passed off as whole).
func (s *Server) export(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	if s.cfg.Transcripts == nil {
		return unavailable("this gateway was started without --transcripts (the workers' transcript directory)")
	}
	if err := s.requireSet(r, set); err != nil {
		return err
	}
	sw := &startedWriter{w: w, progress: func() { s.extendWrite(w, 0) }}
	if _, err := s.backend.Export(r.Context(), set, s.cfg.Transcripts, sw); err != nil {
		if sw.started {
			panic(http.ErrAbortHandler)
		}
		return err
	}
	if !sw.started {
		sw.start()
	}
	return nil
}

// startedWriter writes the NDJSON headers with the first line, and calls
// progress before each write (an export may take longer than the write
// timeout; a client that stops reading is cut off a write timeout after
// its last progress).
type startedWriter struct {
	w        http.ResponseWriter
	started  bool
	progress func()
}

func (s *startedWriter) start() {
	s.w.Header().Set("Content-Type", "application/x-ndjson")
	s.w.WriteHeader(http.StatusOK)
	s.started = true
}

func (s *startedWriter) Write(p []byte) (int, error) {
	if s.progress != nil {
		s.progress()
	}
	if !s.started {
		s.start()
	}
	return s.w.Write(p)
}

// acks is POST /v1/sets/{set}/acks: the whole batch is checked against what
// the set holds before any is sent. Once it has succeeded, the same
// request_id with the same receipts answers the same again, and with other
// receipts is a 409 (the client library keeps a record of it in Temporal).
func (s *Server) acks(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req AckRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	lines, err := receiptLines(req)
	if err != nil {
		return err
	}
	if err := s.requireSetOnce(r, set); err != nil {
		return err
	}
	sum, err := s.backend.Acknowledge(r.Context(), trainer.AckRequest{Set: set, Receipts: lines, Field: "receipts", RequestID: req.RequestID})
	s.healths.drop(set)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, AckResponse{
		Receipts: sum.Acknowledged + sum.Already + sum.Closed, Acknowledged: sum.Acknowledged, Already: sum.Already, Closed: sum.Closed,
	})
}

// maxReceipts bounds one acknowledgement.
const maxReceipts = 10000

// receiptLines checks a batch's shape; receipts are numbered from 1 in the
// library's messages ("line 3" is receipts[2]).
func receiptLines(req AckRequest) ([]trainer.ReceiptLine, error) {
	if err := checkRequestID(req.RequestID); err != nil {
		return nil, err
	}
	if len(req.Receipts) == 0 || len(req.Receipts) > maxReceipts {
		return nil, badRequest("receipts", fmt.Sprintf("receipts: want 1..%d, got %d", maxReceipts, len(req.Receipts)))
	}
	lines := make([]trainer.ReceiptLine, len(req.Receipts))
	for i, rc := range req.Receipts {
		field := fmt.Sprintf("receipts[%d]", i)
		switch {
		case rc.RolloutID == "":
			return nil, badRequest(field+".rollout_id", field+".rollout_id is required")
		case rc.Attempt < 0:
			return nil, badRequest(field+".attempt", fmt.Sprintf("%s.attempt %d is negative", field, rc.Attempt))
		case len(rc.SHA256) != 64 || strings.Trim(rc.SHA256, "0123456789abcdef") != "":
			return nil, badRequest(field+".sha256", fmt.Sprintf("%s.sha256 %q: want 64 lower-case hex digits", field, rc.SHA256))
		}
		lines[i] = trainer.ReceiptLine{Line: i + 1, Receipt: rc}
	}
	return lines, nil
}

// maxInFlight is POST /v1/sets/{set}/max_in_flight: it changes how many of
// the set's rollouts run at once, while the set runs.
func (s *Server) maxInFlight(w http.ResponseWriter, r *http.Request) error {
	name, err := pathSet(r)
	if err != nil {
		return err
	}
	var req MaxInFlightRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if err := setpkg.ValidateMaxInFlight("max_in_flight", req.MaxInFlight); err != nil {
		return badRequest("max_in_flight", err.Error())
	}
	st, err := s.backend.SetMaxInFlight(r.Context(), name, req.MaxInFlight)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, AdmissionResponse{Set: name, MaxInFlight: st.MaxInFlight, Running: st.Running, Queued: st.Queued, Total: st.Total})
}

// policyVersion is POST /v1/sets/{set}/policy_version.
func (s *Server) policyVersion(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req PolicyVersionRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkPolicyVersion(req); err != nil {
		return err
	}
	if err := s.requireSet(r, set); err != nil {
		return err
	}
	res, err := s.backend.Staleness(r.Context(), trainer.StalenessRequest{Set: set, Version: req.Version, MaxLag: req.MaxLag, Cancel: req.Action == ActionCancel})
	if err != nil {
		return err
	}
	out := PolicyVersionResponse{Version: req.Version, Checked: res.Checked, Stale: len(res.Stale), Cancelled: res.Cancelled, Rollouts: res.Stale}
	if out.Rollouts == nil {
		out.Rollouts = []StaleRollout{}
	}
	if req.Action == ActionFlag {
		out.Flagged = len(res.Stale)
	}
	return writeJSON(w, http.StatusOK, out)
}

func checkPolicyVersion(req PolicyVersionRequest) error {
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	switch {
	case req.Version < 0:
		return badRequest("version", fmt.Sprintf("version %d is negative", req.Version))
	case req.MaxLag < 0:
		return badRequest("max_lag", fmt.Sprintf("max_lag %d is negative", req.MaxLag))
	case req.Action != ActionCancel && req.Action != ActionFlag:
		return badRequest("action", fmt.Sprintf("action %q: want %q or %q", req.Action, ActionCancel, ActionFlag))
	}
	return nil
}

// progressEvery is how often the rollouts of a submission publish their
// progress time, for a watchdog of the given window: at most half of it, so
// a working rollout never looks stalled to the feed, and never more often
// than the rollout allows. 0 (the rollout's default) when that is already
// often enough.
func progressEvery(window time.Duration) time.Duration {
	if window/2 >= rollout.DefaultProgressEvery {
		return 0
	}
	return max(window/2, rollout.MinProgressEvery)
}
