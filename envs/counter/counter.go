// Package counter is the smallest real environment: an integer counter the
// agent raises with an "increment" tool until it reaches a target. It exists
// so recovery can be tested end to end with a state that is easy to compare,
// and its optional padding makes observations as large as a test needs.
package counter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"

	"github.com/turnstile-rl/turnstile/envs"
)

// Names the environment declares.
const (
	// Name is the environment's name on the server.
	Name = "counter"
	// ToolIncrement raises the counter by "amount".
	ToolIncrement = "increment"
)

// Limits of a task and of the increment tool.
const (
	MinAmount  = 1
	MaxAmount  = 10
	MaxPadding = 1 << 20 // bytes of filler an observation may carry
)

// Instructions is the system prompt of every episode.
const Instructions = "You control a counter. Call the increment tool until the counter reaches the target, then answer done."

// incrementParameters is the JSON Schema of the increment tool's arguments.
const incrementParameters = `{"type":"object","properties":{"amount":{"type":"integer","minimum":1,"maximum":10,"description":"how much to add to the counter"}},"required":["amount"],"additionalProperties":false}`

// taskSchema is the JSON Schema of a task (ParseTask checks the same).
const taskSchema = `{"type":"object","properties":{"target":{"type":"integer","minimum":0},"start":{"type":"integer","minimum":0},"padding":{"type":"integer","minimum":0,"maximum":1048576},"refuse_verify":{"type":"string","enum":["","first","always"]}},"required":["target"],"additionalProperties":false}`

// filler is the repeating pattern padding is cut from: ASCII, so its byte
// count is its length.
const filler = "abcdefghijklmnopqrstuvwxyz0123456789"

// Task is the task JSON of an episode.
type Task struct {
	Target  int64 `json:"target"`
	Start   int64 `json:"start"`
	Padding int   `json:"padding"`
	// RefuseVerify injects an environment failure, for tests of what
	// happens to a rollout whose environment fails (group retries):
	// RefuseFirst refuses the verify of an episode (task and seed) the
	// first time this environment is asked, as a sandbox that crashes on a
	// rollout's first attempt only; RefuseAlways refuses every verify.
	RefuseVerify string `json:"refuse_verify"`
}

// Values of Task.RefuseVerify.
const (
	RefuseFirst  = "first"
	RefuseAlways = "always"
)

// Env is the counter environment. It holds no state of its own, so one value
// serves any number of concurrent sessions; only tasks with RefuseVerify
// "first" make it remember the episodes it has refused.
type Env struct {
	mu      sync.Mutex
	refused map[string]bool
}

// New returns the counter environment.
func New() *Env { return &Env{} }

var _ envs.Environment = (*Env)(nil)

// Spec declares the counter: exportable state, tool calls.
func (*Env) Spec() envs.Spec {
	return envs.Spec{
		Name:  Name,
		Mode:  envs.ModeExportRestore,
		Style: envs.StyleTools,
		Tools: []envs.Tool{{
			Name:        ToolIncrement,
			Description: "Add amount (1 to 10) to the counter and observe its new value.",
			Parameters:  json.RawMessage(incrementParameters),
		}},
		TaskFormat: &envs.TaskFormat{
			Description: "Raise the counter from start (default 0) to target; padding adds that many bytes of filler to each observation.",
			Schema:      json.RawMessage(taskSchema),
			Example:     json.RawMessage(`{"target":3}`),
		},
	}
}

// Start begins an episode. The seed is unused: the task alone decides the
// episode, which keeps recovered runs identical to uninterrupted ones.
func (e *Env) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	t, err := ParseTask(task)
	if err != nil {
		return nil, envs.Start{}, err
	}
	s := &Session{env: e, st: State{Start: t.Start, Target: t.Target, Padding: t.Padding, Value: t.Start, RefuseVerify: t.RefuseVerify}}
	if t.RefuseVerify != "" {
		s.st.Seed = seed // the episode's identity for RefuseFirst
	}
	return s, envs.Start{
		Instructions: Instructions,
		Observation: fmt.Sprintf("Increase the counter from %d to %d.\nTASK {\"start\":%d,\"target\":%d}",
			t.Start, t.Target, t.Start, t.Target),
	}, nil
}

// ParseTask reads a task strictly: target is required, start and padding
// default to 0, unknown fields and out-of-range values are refused with
// envs.CodeBadTask.
func ParseTask(raw json.RawMessage) (Task, error) {
	var in struct {
		Target       *int64 `json:"target"`
		Start        *int64 `json:"start"`
		Padding      *int   `json:"padding"`
		RefuseVerify string `json:"refuse_verify"`
	}
	if err := decodeStrict(raw, &in); err != nil {
		return Task{}, envs.Errorf(envs.CodeBadTask, "counter task: %v", err)
	}
	if in.Target == nil {
		return Task{}, envs.Errorf(envs.CodeBadTask, "counter task: target is required")
	}
	if err := checkRefuse(in.RefuseVerify); err != nil {
		return Task{}, err
	}
	t := Task{Target: *in.Target, RefuseVerify: in.RefuseVerify}
	if in.Start != nil {
		t.Start = *in.Start
	}
	if in.Padding != nil {
		t.Padding = *in.Padding
	}
	switch {
	case t.Target < 0:
		return Task{}, envs.Errorf(envs.CodeBadTask, "counter task: target %d is negative", t.Target)
	case t.Start < 0:
		return Task{}, envs.Errorf(envs.CodeBadTask, "counter task: start %d is negative", t.Start)
	case t.Padding < 0 || t.Padding > MaxPadding:
		return Task{}, envs.Errorf(envs.CodeBadTask, "counter task: padding %d outside 0..%d", t.Padding, MaxPadding)
	}
	return t, nil
}

// checkRefuse refuses an unknown RefuseVerify mode.
func checkRefuse(mode string) error {
	switch mode {
	case "", RefuseFirst, RefuseAlways:
		return nil
	}
	return envs.Errorf(envs.CodeBadTask, "counter task: refuse_verify %q: want %q or %q", mode, RefuseFirst, RefuseAlways)
}

// State is the whole state of a session, as Export writes it.
type State struct {
	Start   int64 `json:"start"`
	Target  int64 `json:"target"`
	Padding int   `json:"padding"`
	Value   int64 `json:"value"`
	Ops     int64 `json:"ops"` // increments applied
	// RefuseVerify and Seed are set only for a task that injects a
	// failure, so every other state exports exactly as before.
	RefuseVerify string `json:"refuse_verify,omitempty"`
	Seed         int64  `json:"seed,omitempty"`
}

// Session is one counter episode.
type Session struct {
	env *Env
	st  State
}

var _ envs.Session = (*Session)(nil)

// State returns a copy of the session's state (for tests and operators).
func (s *Session) State() State { return s.st }

// Apply runs the increment tool; anything else is refused and changes nothing.
func (s *Session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool != ToolIncrement {
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "counter has no tool %q (only %q)", tool, ToolIncrement)
	}
	var in struct {
		Amount *int64 `json:"amount"`
	}
	if err := decodeStrict(args, &in); err != nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "increment arguments: %v", err)
	}
	if in.Amount == nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "increment arguments: amount is required")
	}
	amount := *in.Amount
	if amount < MinAmount || amount > MaxAmount {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "increment amount %d outside %d..%d", amount, MinAmount, MaxAmount)
	}
	if s.st.Value > math.MaxInt64-amount {
		return envs.Outcome{}, envs.Errorf(envs.CodeIllegalAction, "counter %d cannot grow by %d", s.st.Value, amount)
	}
	s.st.Value += amount
	s.st.Ops++
	return envs.Outcome{Observation: observation(s.st.Value, s.st.Padding)}, nil
}

// observation is "counter=K", then a newline and padding bytes of filler when
// the task asks for padding.
func observation(value int64, padding int) string {
	head := fmt.Sprintf("counter=%d", value)
	if padding <= 0 {
		return head
	}
	var b strings.Builder
	b.Grow(len(head) + 1 + padding)
	b.WriteString(head)
	b.WriteByte('\n')
	for padding > 0 {
		n := min(padding, len(filler))
		b.WriteString(filler[:n])
		padding -= n
	}
	return b.String()
}

// Verify scores 1 when the counter equals the target, else 0; a task that
// injects a failure may refuse instead.
func (s *Session) Verify() (envs.Verdict, error) {
	if s.env.refuses(s.st) {
		return envs.Verdict{}, envs.Errorf(envs.CodeBadState,
			"counter verify refused (refuse_verify %q): the environment failed", s.st.RefuseVerify)
	}
	details, err := json.Marshal(struct {
		Value  int64 `json:"value"`
		Target int64 `json:"target"`
	}{s.st.Value, s.st.Target})
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("counter verdict details: %w", err)
	}
	reward := 0.0
	if s.st.Value == s.st.Target {
		reward = 1
	}
	return envs.Verdict{Reward: reward, Details: details}, nil
}

// refuses says whether the verify of a session in state st is refused, and
// remembers a RefuseFirst episode it refused.
func (e *Env) refuses(st State) bool {
	switch st.RefuseVerify {
	case RefuseAlways:
		return true
	case RefuseFirst:
		key := fmt.Sprintf("%d/%d/%d/%d", st.Seed, st.Start, st.Target, st.Padding)
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.refused == nil {
			e.refused = map[string]bool{}
		}
		first := !e.refused[key]
		e.refused[key] = true
		return first
	}
	return false
}

// Export returns the state as JSON; the struct's field order makes it
// deterministic.
func (s *Session) Export() (json.RawMessage, error) {
	b, err := json.Marshal(s.st)
	if err != nil {
		return nil, fmt.Errorf("export counter state: %w", err)
	}
	return b, nil
}

// Close releases nothing: the counter lives in memory.
func (*Session) Close() error { return nil }

// Restore rebuilds a session from Export output. Every field is required and
// checked, including that value and ops agree (each op adds 1..10), so a
// corrupt state is refused instead of installed.
func (e *Env) Restore(state json.RawMessage) (envs.Session, error) {
	var in struct {
		Start        *int64 `json:"start"`
		Target       *int64 `json:"target"`
		Padding      *int   `json:"padding"`
		Value        *int64 `json:"value"`
		Ops          *int64 `json:"ops"`
		RefuseVerify string `json:"refuse_verify"`
		Seed         int64  `json:"seed"`
	}
	if err := decodeStrict(state, &in); err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "counter state: %v", err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"start", in.Start != nil}, {"target", in.Target != nil}, {"padding", in.Padding != nil}, {"value", in.Value != nil}, {"ops", in.Ops != nil}} {
		if !f.ok {
			return nil, envs.Errorf(envs.CodeBadState, "counter state: %s is missing", f.name)
		}
	}
	if err := checkRefuse(in.RefuseVerify); err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "counter state: %v", err)
	}
	st := State{Start: *in.Start, Target: *in.Target, Padding: *in.Padding, Value: *in.Value, Ops: *in.Ops, RefuseVerify: in.RefuseVerify, Seed: in.Seed}
	switch {
	case st.Start < 0 || st.Target < 0 || st.Value < 0 || st.Ops < 0:
		return nil, envs.Errorf(envs.CodeBadState, "counter state: negative value in %+v", st)
	case st.Padding < 0 || st.Padding > MaxPadding:
		return nil, envs.Errorf(envs.CodeBadState, "counter state: padding %d outside 0..%d", st.Padding, MaxPadding)
	case st.Value < st.Start:
		return nil, envs.Errorf(envs.CodeBadState, "counter state: value %d below start %d", st.Value, st.Start)
	}
	grown := st.Value - st.Start
	if st.Ops > grown || (st.Ops <= math.MaxInt64/MaxAmount && grown > st.Ops*MaxAmount) {
		return nil, envs.Errorf(envs.CodeBadState, "counter state: value %d from start %d cannot be reached in %d ops", st.Value, st.Start, st.Ops)
	}
	return &Session{env: e, st: st}, nil
}

// decodeStrict decodes one JSON object into v, refusing unknown fields, wrong
// types, null or empty input and trailing data.
func decodeStrict(raw json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
