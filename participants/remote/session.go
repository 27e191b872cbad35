package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// session is one episode at the remote. Its exported fields are what Export
// saves besides the remote's own state.
type session struct {
	env *Env
	// Task is the task the session was seeded with: NeMo Gym's /verify
	// takes it back.
	Task json.RawMessage `json:"task"`
	// Items are the function calls and their outputs, in order, as NeMo
	// Gym's verify reads them from "response.output".
	Items []json.RawMessage `json:"items"`
	// Reward is the sum of gymnasium step rewards.
	Reward float64 `json:"reward"`
	// Remote is the remote's exported state (in Export output only).
	Remote json.RawMessage `json:"remote,omitempty"`

	cookies   []*http.Cookie
	uncertain error // set once a call's outcome is unknown
}

// call posts to the remote and returns a 2xx answer's body. A 4xx is an
// envs.Error (nothing changed at the remote); an unknown outcome poisons the
// session; a call that was never sent is a plain error to retry.
func (s *session) call(path string, body any) ([]byte, error) {
	if s.uncertain != nil {
		return nil, envs.Errorf(CodeRemoteUncertain, "an earlier call's outcome is unknown (%v); this session takes no more calls", s.uncertain)
	}
	resp, ans, err := s.env.post(path, body, s.cookies)
	switch {
	case errors.Is(err, errNotSent):
		return nil, err
	case err != nil:
		s.uncertain = err
		return nil, envs.Errorf(CodeRemoteUncertain, "%v", err)
	case resp.StatusCode >= 500:
		s.uncertain = fmt.Errorf("%s answered %d", path, resp.StatusCode)
		return nil, envs.Errorf(CodeRemoteUncertain, "remote %s %s answered %d: %s", s.env.cfg.Name, path, resp.StatusCode, truncate(ans))
	case resp.StatusCode >= 400:
		return nil, envs.Errorf(remoteCode(ans), "remote %s %s answered %d: %s", s.env.cfg.Name, path, resp.StatusCode, truncate(ans))
	}
	s.keepCookies(resp.Cookies())
	return ans, nil
}

// keepCookies merges the cookies a remote set into the session's, by name.
func (s *session) keepCookies(set []*http.Cookie) {
	for _, c := range set {
		kept := false
		for i, old := range s.cookies {
			if old.Name == c.Name {
				s.cookies[i], kept = &http.Cookie{Name: c.Name, Value: c.Value}, true
			}
		}
		if !kept {
			s.cookies = append(s.cookies, &http.Cookie{Name: c.Name, Value: c.Value})
		}
	}
}

// remoteCode is the error code a remote's 4xx body names, else
// CodeRemoteRefused.
func remoteCode(ans []byte) string {
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(ans, &b) == nil && b.Error.Code != "" {
		return b.Error.Code
	}
	return CodeRemoteRefused
}

func truncate(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// Apply forwards one tool call (or gymnasium step).
func (s *session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if s.env.cfg.Kind == KindGymnasium {
		return s.step(tool, args)
	}
	if !s.env.hasTool(tool) {
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "no tool %q", tool)
	}
	if !json.Valid(args) {
		args = json.RawMessage("{}")
	}
	ans, err := s.call("/"+tool, args)
	if err != nil {
		return envs.Outcome{}, err
	}
	call, _ := json.Marshal(map[string]any{"type": "function_call", "name": tool, "arguments": string(args)})
	out, _ := json.Marshal(map[string]any{"type": "function_call_output", "output": string(ans)})
	s.Items = append(s.Items, call, out)
	return envs.Outcome{Observation: string(ans)}, nil
}

func (e *Env) hasTool(name string) bool {
	for _, t := range e.cfg.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// step forwards a gymnasium action.
func (s *session) step(tool string, args json.RawMessage) (envs.Outcome, error) {
	var a struct {
		Action *string `json:"action"`
	}
	if tool != envs.StepTool {
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "no tool %q (a gymnasium environment has only %q)", tool, envs.StepTool)
	}
	if json.Unmarshal(args, &a) != nil || a.Action == nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, `step arguments: want {"action": "..."}`)
	}
	ans, err := s.call("/step", map[string]string{"action": *a.Action})
	if err != nil {
		return envs.Outcome{}, err
	}
	var r struct {
		Observation json.RawMessage `json:"observation"`
		Reward      float64         `json:"reward"`
		Terminated  bool            `json:"terminated"`
		Truncated   bool            `json:"truncated"`
	}
	if err := json.Unmarshal(ans, &r); err != nil {
		s.uncertain = fmt.Errorf("/step answered %s", truncate(ans))
		return envs.Outcome{}, envs.Errorf(CodeRemoteUncertain, "remote %s /step answered no transition: %v", s.env.cfg.Name, err)
	}
	s.Reward += r.Reward
	return envs.Outcome{Observation: text(r.Observation), Reward: r.Reward, Terminated: r.Terminated, Truncated: r.Truncated}, nil
}

// Verify scores the episode: NeMo Gym's /verify, or the gymnasium sum of
// step rewards.
func (s *session) Verify() (envs.Verdict, error) {
	if s.env.cfg.Kind == KindGymnasium {
		return envs.Verdict{Reward: s.Reward}, nil
	}
	body := map[string]json.RawMessage{}
	if err := json.Unmarshal(s.Task, &body); err != nil {
		body = map[string]json.RawMessage{"task": s.Task}
	}
	output := s.Items
	if output == nil {
		output = []json.RawMessage{}
	}
	resp, _ := json.Marshal(map[string]any{"output": output})
	body["response"] = resp
	ans, err := s.call("/verify", body)
	if err != nil {
		return envs.Verdict{}, err
	}
	var v struct {
		Reward *float64 `json:"reward"`
	}
	if json.Unmarshal(ans, &v) != nil || v.Reward == nil {
		return envs.Verdict{}, envs.Errorf(CodeRemoteRefused, "remote %s /verify answered no reward: %s", s.env.cfg.Name, truncate(ans))
	}
	return envs.Verdict{Reward: *v.Reward, Details: json.RawMessage(ans)}, nil
}

// Export saves the session: its own fields and the remote's state. Asking
// for the state changes nothing at the remote, so a failure is a plain
// error (the checkpoint fails) and does not poison the session.
func (s *session) Export() (json.RawMessage, error) {
	if s.env.spec.Mode != envs.ModeExportRestore {
		return nil, envs.Errorf(envs.CodeNotExportable, "remote %s declared no export/restore", s.env.cfg.Name)
	}
	resp, ans, err := s.env.post(RouteExport, map[string]any{}, s.cookies)
	if err != nil {
		return nil, err
	}
	var r struct {
		State json.RawMessage `json:"state"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(ans, &r) != nil || len(r.State) == 0 {
		return nil, fmt.Errorf("remote %s %s answered %d and no state: %s", s.env.cfg.Name, RouteExport, resp.StatusCode, truncate(ans))
	}
	out := *s
	out.Remote = r.State
	return json.Marshal(&out)
}

// Close ends a gymnasium episode at the remote (best effort: the session
// is gone either way); a NeMo Gym session ends with its verify.
func (s *session) Close() error {
	if s.env.cfg.Kind == KindGymnasium && s.uncertain == nil {
		_, _, _ = s.env.post("/close", map[string]any{}, s.cookies)
	}
	return nil
}
