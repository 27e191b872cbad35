package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// check is one rule's driver: it returns the evidence of a pass, or an
// error saying what the participant did wrong (errSkip: not applicable).
// A check marked last runs after all the others (R16 judges every error
// answer of the run), though it is reported in its place.
type check struct {
	Rule
	run  func(ctx context.Context, k *kit) (string, error)
	last bool
}

// skipError marks a rule the participant cannot be checked for.
type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }

// allChecks is the rule table, in RULES.md order.
func allChecks() []check {
	return []check{
		{Rule: Rule{"R1", "data-plane authentication"}, run: checkDataAuth},
		{Rule: Rule{"R2", "control-plane authentication and plane separation"}, run: checkControlAuth},
		{Rule: Rule{"R3", "request-id replay"}, run: checkReplay},
		{Rule: Rule{"R4", "request-id conflict"}, run: checkConflict},
		{Rule: Rule{"R5", "revision check"}, run: checkRevision},
		{Rule: Rule{"R6", "attempt fence: stale attempts"}, run: checkStale},
		{Rule: Rule{"R7", "only the control plane moves the fence"}, run: checkNotInstalled},
		{Rule: Rule{"R8", "authorised start-over"}, run: checkAuthorise},
		{Rule: Rule{"R9", "retire"}, run: checkRetire},
		{Rule: Rule{"R10", "verify is terminal"}, run: checkVerifyTerminal},
		{Rule: Rule{"R11", "phase fence"}, run: checkPhaseFence},
		{Rule: Rule{"R12", "deadlines"}, run: checkDeadlines},
		{Rule: Rule{"R13", "export/restore determinism"}, run: checkExportRestore},
		{Rule: Rule{"R14", "restart-only and stateless modes"}, run: checkRestartOnly},
		{Rule: Rule{"R15", "malformed requests"}, run: checkMalformed},
		{Rule: Rule{"R16", "error envelope and unknown routes"}, run: checkEnvelope, last: true},
		{Rule: Rule{"R17", "capabilities"}, run: checkCapabilities},
		{Rule: Rule{"R18", "control session ids"}, run: checkSessionIDs},
		{Rule: Rule{"R19", "order of checks on a control operation"}, run: checkControlOrder},
		{Rule: Rule{"R20", "a restore answers what it installed"}, run: checkRestoreAnswer},
		{Rule: Rule{"R21", "counters"}, run: checkCounters},
		{Rule: Rule{"R22", "the fence of a rollout never seen"}, run: checkUnseen},
		{Rule: Rule{"R23", "environment refusals are not receipts"}, run: checkRefusalsNotStored},
		{Rule: Rule{"R24", "canonical json and number equality"}, run: checkCanonicalJSON},
		{Rule: Rule{"R25", "stateless environments"}, run: checkStateless},
		{Rule: Rule{"R26", "the checkpoint artifact"}, run: checkArtifact},
		{Rule: Rule{"R27", "replay-restore"}, run: checkReplayRestore},
		{Rule: Rule{"R28", "leases"}, run: checkLease},
	}
}

// kit is one run against one participant.
type kit struct {
	cfg    Config
	hc     *http.Client
	spec   *Spec
	prefix string
	// errorsSeen counts the error answers checked against the document;
	// undocumented lists those it does not allow, and serverErrors the
	// 5xx answers.
	errorsSeen   int
	undocumented []string
	serverErrors []string
	// used are the rollout ids the kit made up, for the clean-up.
	used map[string]bool
}

// Run checks every rule against the participant cfg names, then retires
// the live sessions of the kit's rollouts (line END) and, with
// cfg.EndToEnd, runs a set through the coordinator (line E2E). The error is
// a run that could not start (bad configuration, participant unreachable
// or not fresh); a rule the participant breaks is a Fail result.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	k, err := newKit(cfg)
	if err != nil {
		return nil, err
	}
	if err := k.preflight(ctx); err != nil {
		return nil, err
	}
	checks := allChecks()
	out := make([]Result, len(checks))
	for _, last := range []bool{false, true} {
		for i, c := range checks {
			if c.last == last {
				out[i] = k.runCheck(ctx, c)
			}
		}
	}
	out = append(out, k.cleanup(ctx))
	if cfg.EndToEnd != nil {
		out = append(out, k.endToEnd(ctx))
	}
	return out, nil
}

// runCheck runs one rule and resumes a control session it left open.
func (k *kit) runCheck(ctx context.Context, c check) Result {
	res := Result{Rule: c.Rule}
	evidence, err := c.run(ctx, k)
	var skip skipError
	switch {
	case errors.As(err, &skip):
		res.Verdict, res.Evidence = Skip, skip.reason
	case err != nil:
		res.Verdict, res.Evidence = Fail, err.Error()
	default:
		res.Verdict, res.Evidence = Pass, evidence
	}
	if note := k.backToIdle(ctx); note != "" {
		res.Verdict, res.Evidence = Fail, res.Evidence+"; "+note
	}
	return res
}

// endToEnd runs cfg.EndToEnd and cleans up after it.
func (k *kit) endToEnd(ctx context.Context) Result {
	res := Result{Rule: Rule{ID: EndToEndID, Name: "checkpoint, kill and restore through the coordinator"}}
	evidence, err := k.cfg.EndToEnd(ctx, Target{URL: k.cfg.URL, DataToken: k.cfg.DataToken, ControlToken: k.cfg.ControlToken,
		HTTPClient: k.hc, Env: k.cfg.Env, Prefix: k.prefix + "-e2e", Dir: k.cfg.Dir})
	if err != nil {
		res.Verdict, res.Evidence = Fail, err.Error()
	} else {
		res.Verdict, res.Evidence = Pass, evidence
	}
	if note := k.backToIdle(ctx); note != "" {
		res.Verdict, res.Evidence = Fail, res.Evidence+"; "+note
	}
	return res
}

func newKit(cfg Config) (*kit, error) {
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	if u, err := url.Parse(cfg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("participant URL %q is not an http:// or https:// URL", cfg.URL)
	}
	switch {
	case cfg.DataToken == "" || cfg.ControlToken == "":
		return nil, errors.New("both the data token and the control token are required")
	case cfg.DataToken == cfg.ControlToken:
		return nil, errors.New("the data and control tokens must differ (RULES.md R2)")
	case !filepath.IsAbs(cfg.Dir):
		return nil, fmt.Errorf("checkpoint directory %q is not an absolute path", cfg.Dir)
	}
	fill := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	fill(&cfg.Env, DefaultEnv)
	fill(&cfg.Tool, DefaultTool)
	if len(cfg.Task) == 0 {
		cfg.Task = json.RawMessage(DefaultTask)
	}
	if len(cfg.Args) == 0 {
		cfg.Args = json.RawMessage(DefaultArgs)
	}
	if cfg.RestartEnv != "" && len(cfg.RestartTask) == 0 {
		return nil, errors.New("a restart-only environment needs a task (RestartTask)")
	}
	if cfg.ReplayEnv != "" && (len(cfg.ReplayTask) == 0 || len(cfg.ReplayCalls) != replayCalls) {
		return nil, fmt.Errorf("a replay environment needs a task (ReplayTask) and %d calls (ReplayCalls), got %d", replayCalls, len(cfg.ReplayCalls))
	}
	if cfg.RetiredSessions < 0 {
		return nil, fmt.Errorf("retired sessions %d is negative", cfg.RetiredSessions)
	}
	if cfg.NoControlURL != "" {
		cfg.NoControlURL = strings.TrimRight(cfg.NoControlURL, "/")
		if u, err := url.Parse(cfg.NoControlURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("participant URL without a control plane %q is not an http:// or https:// URL", cfg.NoControlURL)
		}
	}
	spec, err := LoadSpec()
	if err != nil {
		return nil, err
	}
	k := &kit{cfg: cfg, hc: cfg.HTTPClient, spec: spec, prefix: cfg.Prefix, used: map[string]bool{}}
	if k.hc == nil {
		k.hc = http.DefaultClient
	}
	if k.prefix == "" {
		b := make([]byte, 4)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		k.prefix = "conformance-" + hex.EncodeToString(b)
	}
	return k, nil
}

// preflight checks that the participant answers and is fresh.
func (k *kit) preflight(ctx context.Context) error {
	a, err := k.do(ctx, protocol.RouteHealth, "", "", nil)
	if err != nil {
		return fmt.Errorf("participant unreachable: %w", err)
	}
	if a.status != http.StatusOK {
		return fmt.Errorf("GET /healthz answered %d %s", a.status, a.body)
	}
	st, err := k.controlStatus(ctx)
	if err != nil {
		return fmt.Errorf("control status: %w", err)
	}
	if st.Phase != protocol.PhaseIdle || st.Admission != protocol.AdmissionOpen {
		return fmt.Errorf("participant is not fresh: phase %s, admission %s (resume checkpoint %q first)", st.Phase, st.Admission, st.CheckpointID)
	}
	return nil
}

// backToIdle resumes a control session a failed rule left open, so the
// next rules start from idle; it returns a note when it had to.
func (k *kit) backToIdle(ctx context.Context) string {
	st, err := k.controlStatus(ctx)
	if err != nil {
		return "control status after the rule: " + err.Error()
	}
	if st.Phase == protocol.PhaseIdle && st.Admission == protocol.AdmissionOpen {
		return ""
	}
	req := protocol.ResumeRequest{CheckpointID: st.CheckpointID, RestoreID: st.RestoreID}
	a, err := k.do(ctx, protocol.RouteControlResume, "", k.controlAuth(), req)
	if err == nil && a.status == http.StatusOK {
		return fmt.Sprintf("the rule left phase %s, admission %s: resumed", st.Phase, st.Admission)
	}
	return fmt.Sprintf("the rule left phase %s, admission %s, and resume failed: %v %d %s", st.Phase, st.Admission, err, a.status, a.body)
}

// answer is one HTTP answer.
type answer struct {
	route   string
	status  int
	body    []byte
	header  http.Header
	code    string // the error code, for an error envelope
	message string
}

func (a answer) String() string {
	if a.code != "" {
		return fmt.Sprintf("%d %s (%s)", a.status, a.code, a.message)
	}
	return fmt.Sprintf("%d %s", a.status, truncate(string(a.body), 300))
}

func (k *kit) dataAuth() string    { return "Bearer " + k.cfg.DataToken }
func (k *kit) controlAuth() string { return "Bearer " + k.cfg.ControlToken }

// do sends body (JSON-encoded unless []byte) to route ("METHOD /path", with
// id in place of {rollout_id}) with authorization as the Authorization
// header ("" for none), and checks an error answer against the document.
func (k *kit) do(ctx context.Context, route, id, authorization string, body any) (answer, error) {
	method, path, _ := strings.Cut(route, " ")
	path = strings.Replace(path, "{rollout_id}", url.PathEscape(id), 1)
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return answer{}, err
		}
		rd = bytes.NewReader(enc)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, k.cfg.URL+path, rd)
	if err != nil {
		return answer{}, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	a := answer{route: route, status: resp.StatusCode, body: raw, header: resp.Header}
	k.judge(&a)
	return a, nil
}

// judge decodes an error answer and records whether the document allows it.
func (k *kit) judge(a *answer) {
	if a.status < 400 {
		return
	}
	k.errorsSeen++
	var eb protocol.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	envelope := dec.Decode(&eb) == nil && eb.Error.Code != "" && eb.Error.Message != ""
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		envelope = false
	}
	a.code, a.message = eb.Error.Code, eb.Error.Message
	switch {
	case a.status >= 500 && a.code != protocol.CodeParked:
		k.serverErrors = append(k.serverErrors, fmt.Sprintf("%s → %s", a.route, a))
	case !envelope:
		k.undocumented = append(k.undocumented, fmt.Sprintf("%s → %d %q is not an error envelope", a.route, a.status, truncate(string(a.body), 120)))
	case k.spec.Operations[a.route].ID == "":
		// A route the kit made up (R16): only 404 not_found will do.
		if a.status != http.StatusNotFound || a.code != protocol.CodeNotFound {
			k.undocumented = append(k.undocumented, fmt.Sprintf("unknown route %s → %s, want 404 not_found", a.route, a))
		}
	default:
		if err := k.spec.Check(a.route, a.status, a.code); err != nil {
			k.undocumented = append(k.undocumented, err.Error())
		}
	}
}

// want checks an answer's status and, for an error, its code.
func want(what string, a answer, status int, code string) error {
	if a.status != status || (code != "" && a.code != code) {
		w := fmt.Sprint(status)
		if code != "" {
			w += " " + code
		}
		return fmt.Errorf("%s answered %s, want %s", what, a, w)
	}
	return nil
}

// decode checks a 200 and decodes it into out.
func decode(what string, a answer, out any) error {
	if err := want(what, a, http.StatusOK, ""); err != nil {
		return err
	}
	if err := json.Unmarshal(a.body, out); err != nil {
		return fmt.Errorf("%s: decode answer %s: %w", what, truncate(string(a.body), 200), err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
