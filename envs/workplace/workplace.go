// Package workplace is the workplace-assistant reference environment: an
// office world of email, calendar, CRM customers, analytics and project
// tasks, driven by tool calls. Each task is generated from (seed, index)
// together with its ground-truth end state; verify gives reward 1 when every
// table ends equal to the ground truth. Sessions export and restore their
// whole state, so a restored session continues exactly like an uninterrupted
// one (the Go counterpart of NeMo Gym's Workplace Assistant adapter).
package workplace

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/turnstile-rl/turnstile/envs"
)

// Name is the environment's name in its Spec.
const Name = "workplace"

// Instructions is the system prompt of every episode.
const Instructions = "You are a workplace assistant for " + UserAddress + ". " +
	"You manage email, the calendar, CRM customer records, project tasks and read website analytics " +
	"only through the tools. Dates are YYYY-MM-DD, times HH:MM, ids are 8 digits. " +
	"Do exactly what the task asks and nothing else, then answer \"done\" without tool calls."

// Env is the workplace environment. It holds no state of its own, so one
// value serves any number of concurrent sessions.
type Env struct{}

// New returns the environment.
func New() *Env { return &Env{} }

var _ envs.Environment = (*Env)(nil)

// Spec declares export_restore and the tool-calling style.
func (*Env) Spec() envs.Spec {
	return envs.Spec{Name: Name, Mode: envs.ModeExportRestore, Style: envs.StyleTools, Tools: Tools()}
}

// Start generates the task's tables. The content depends on the task's own
// seed and index only; the rollout seed does not change the world, so a task
// means the same thing whichever rollout runs it.
func (*Env) Start(_ int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	t, err := ParseTask(task)
	if err != nil {
		return nil, envs.Start{}, err
	}
	ep, err := generate(t)
	if err != nil {
		return nil, envs.Start{}, envs.Errorf(envs.CodeBadTask, "%v", err)
	}
	s := &session{task: t, now: ep.Now, w: ep.Initial.clone()}
	return s, envs.Start{Instructions: Instructions, Observation: startObservation(ep)}, nil
}

// Restore rebuilds a session from Export output after validating all of it.
func (*Env) Restore(state json.RawMessage) (envs.Session, error) {
	t, w, err := decodeState(state)
	if err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "%v", err)
	}
	ep, err := generate(t)
	if err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "regenerate task: %v", err)
	}
	return &session{task: t, now: ep.Now, w: w}, nil
}

// session is one episode.
type session struct {
	task Task
	now  clock
	w    world
}

// Apply runs one tool. Reads return observations and leave the state as it
// was; any error leaves it untouched.
func (s *session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	obs, err := apply(&s.w, s.now, tool, args)
	if err != nil {
		return envs.Outcome{}, err
	}
	return envs.Outcome{Observation: obs}, nil
}

// VerifyDetails explains a verdict.
type VerifyDetails struct {
	TaskID   string   `json:"task_id"`
	Template string   `json:"template"`
	Differs  []string `json:"differs"` // tables whose end state is not the ground truth
}

// Verify compares every table with the ground truth.
func (s *session) Verify() (envs.Verdict, error) {
	ep, err := generate(s.task)
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("verify: %w", err)
	}
	got, err := s.w.Tables.tableJSON()
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("verify: %w", err)
	}
	want, err := ep.Expected.tableJSON()
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("verify: %w", err)
	}
	d := VerifyDetails{TaskID: s.task.TaskID, Template: ep.Template, Differs: []string{}}
	for _, name := range tableNames {
		if !bytes.Equal(got[name], want[name]) {
			d.Differs = append(d.Differs, name)
		}
	}
	details, err := json.Marshal(d)
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("verify: encode details: %w", err)
	}
	reward := 0.0
	if len(d.Differs) == 0 {
		reward = 1
	}
	return envs.Verdict{Reward: reward, Details: details}, nil
}

// Export returns the whole state as deterministic JSON.
func (s *session) Export() (json.RawMessage, error) { return encodeState(s.task, s.w) }

// Close releases nothing: the state is plain memory.
func (s *session) Close() error { return nil }
