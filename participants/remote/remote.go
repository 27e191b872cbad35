package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// maxAnswerBytes bounds what is read of one remote answer.
const maxAnswerBytes = 16 << 20

// stepParameters is the JSON Schema of a gymnasium step.
var stepParameters = json.RawMessage(`{"type":"object","properties":{"action":{"type":"string"}},"required":["action"],"additionalProperties":false}`)

// ParseTools reads a tool list: envs.Tool objects, or OpenAI / Responses
// function tools ({"type":"function","name",...} or
// {"type":"function","function":{"name",...}}).
func ParseTools(b []byte) ([]envs.Tool, error) {
	var raw []struct {
		envs.Tool
		Type     string     `json:"type"`
		Function *envs.Tool `json:"function"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON array of tools: %w", err)
	}
	out := make([]envs.Tool, 0, len(raw))
	for i, r := range raw {
		t := r.Tool
		if r.Function != nil {
			t = *r.Function
		}
		if r.Type != "" && r.Type != "function" {
			return nil, fmt.Errorf("tool %d: type %q (want function)", i, r.Type)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tool %d has no name", i)
		}
		if len(t.Parameters) == 0 {
			t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, t)
	}
	return out, nil
}

// Env is one remote environment.
type Env struct {
	cfg  Config
	hc   *http.Client
	spec envs.Spec
}

var _ envs.Environment = (*Env)(nil)

// New builds the environment and reads the remote's export/restore
// declaration; a remote that cannot be reached is an error. hc nil means a
// client with cfg.Timeout.
func New(ctx context.Context, cfg Config, hc *http.Client) (*Env, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	e := &Env{cfg: cfg, hc: hc}
	mode, err := e.declaredMode(ctx)
	if err != nil {
		return nil, err
	}
	e.spec = envs.Spec{Name: cfg.Name, Mode: mode, Style: envs.StyleTools, Tools: slices.Clone(cfg.Tools)}
	if cfg.Kind == KindGymnasium {
		e.spec.Style = envs.StyleGym
		e.spec.Tools = []envs.Tool{{Name: envs.StepTool, Description: "Play one action.", Parameters: stepParameters}}
	}
	return e, nil
}

// declaredMode asks the remote whether it exports and restores sessions:
// any answer but {"checkpoint_mode":"export_restore"} means restart_only.
func (e *Env) declaredMode(ctx context.Context) (envs.Mode, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.URL+RouteCheckpoint, nil)
	if err != nil {
		return "", fmt.Errorf("remote %s: %w", e.cfg.Name, err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("remote %s: cannot reach %s: %w", e.cfg.Name, e.cfg.URL, err)
	}
	defer resp.Body.Close()
	var d struct {
		Mode envs.Mode `json:"checkpoint_mode"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &d) == nil && d.Mode == envs.ModeExportRestore {
		return envs.ModeExportRestore, nil
	}
	return envs.ModeRestartOnly, nil
}

// Spec declares the environment.
func (e *Env) Spec() envs.Spec { return e.spec }

// Start seeds a session at the remote.
func (e *Env) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	s := &session{env: e, Task: taskObject(task)}
	var (
		body any
		path string
	)
	if e.cfg.Kind == KindGymnasium {
		path, body = "/reset", map[string]any{"seed": seed, "options": s.Task}
	} else {
		path, body = "/seed_session", s.Task
	}
	ans, err := s.call(path, body)
	if err != nil {
		return nil, envs.Start{}, err
	}
	st := envs.Start{Instructions: e.cfg.Instructions, Observation: e.firstObservation(s.Task, ans)}
	return s, st, nil
}

// firstObservation is what the agent sees first: a gymnasium reset's
// observation; for NeMo Gym, the user input of the task's
// responses_create_params (else the task itself).
func (e *Env) firstObservation(task json.RawMessage, ans []byte) string {
	if e.cfg.Kind == KindGymnasium {
		var r struct {
			Observation json.RawMessage `json:"observation"`
		}
		_ = json.Unmarshal(ans, &r)
		return text(r.Observation)
	}
	var t struct {
		Params struct {
			Input json.RawMessage `json:"input"`
		} `json:"responses_create_params"`
	}
	if json.Unmarshal(task, &t) == nil && len(t.Params.Input) > 0 {
		var msgs []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(t.Params.Input, &msgs) == nil {
			var parts []string
			for _, m := range msgs {
				if m.Role == "user" {
					parts = append(parts, text(m.Content))
				}
			}
			return strings.Join(parts, "\n")
		}
		return text(t.Params.Input)
	}
	return string(task)
}

// Restore rebuilds a session from Export output at the remote (a remote
// that declared export/restore only).
func (e *Env) Restore(state json.RawMessage) (envs.Session, error) {
	if e.spec.Mode != envs.ModeExportRestore {
		return nil, envs.Errorf(envs.CodeNotExportable, "remote %s declared no export/restore", e.cfg.Name)
	}
	var s session
	dec := json.NewDecoder(bytes.NewReader(state))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || len(s.Remote) == 0 {
		return nil, envs.Errorf(envs.CodeBadState, "remote %s: state is not an exported session: %v", e.cfg.Name, err)
	}
	s.env = e
	if _, err := s.call(RouteRestore, map[string]json.RawMessage{"state": s.Remote}); err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "remote %s refused the state: %v", e.cfg.Name, err)
	}
	s.Remote = nil
	return &s, nil
}

// taskObject is the task as a JSON object ({} for none).
func taskObject(task json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(task); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		return t
	}
	return json.RawMessage("{}")
}

// text is a JSON string's value, or any other JSON value's text.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// errNotSent marks a call that never reached the remote: it may be retried.
var errNotSent = errors.New("not sent")

// post sends one request with the session's cookies and returns the answer.
func (e *Env) post(path string, body any, cookies []*http.Cookie) (*http.Response, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, nil, fmt.Errorf("remote %s %s: %w: %w", e.cfg.Name, path, errNotSent, err)
		}
		return nil, nil, fmt.Errorf("remote %s %s: %w", e.cfg.Name, path, err)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("remote %s %s: read answer: %w", e.cfg.Name, path, err)
	}
	return resp, ans, nil
}
