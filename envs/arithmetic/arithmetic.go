// Package arithmetic is a stateless, tool-style environment: one integer
// operation to compute, answered through the tool "answer". It is the
// smallest environment that exercises tool calls and a verifier; there is no
// state worth checkpointing, so it declares ModeStateless.
package arithmetic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/turnstile-rl/turnstile/envs"
)

// Name is the environment's name.
const Name = "arithmetic"

// AnswerTool is the name of the only tool.
const AnswerTool = "answer"

// TaskPrefix starts the machine-readable line of the task observation.
const TaskPrefix = "TASK "

// Operations a task may ask for.
const (
	OpAdd = "+"
	OpSub = "-"
	OpMul = "*"
)

// MaxOperand bounds |a| and |b| so that every result fits in an int64.
const MaxOperand = 1_000_000_000

// stateVersion is the version of the exported state format.
const stateVersion = 1

// Task is one problem: a op b.
type Task struct {
	A  int64  `json:"a"`
	B  int64  `json:"b"`
	Op string `json:"op"`
}

// Result is the exact value of the task.
func (t Task) Result() int64 {
	switch t.Op {
	case OpAdd:
		return t.A + t.B
	case OpSub:
		return t.A - t.B
	default:
		return t.A * t.B
	}
}

// taskFields detects missing fields; a zero operand is legal.
type taskFields struct {
	A  *int64  `json:"a"`
	B  *int64  `json:"b"`
	Op *string `json:"op"`
}

func parseTask(raw json.RawMessage) (Task, error) {
	var f taskFields
	if err := decodeStrict(raw, &f); err != nil {
		return Task{}, err
	}
	if f.A == nil || f.B == nil || f.Op == nil {
		return Task{}, errors.New(`want fields "a", "b" and "op"`)
	}
	t := Task{A: *f.A, B: *f.B, Op: *f.Op}
	if t.Op != OpAdd && t.Op != OpSub && t.Op != OpMul {
		return Task{}, fmt.Errorf("op %q: want %q, %q or %q", t.Op, OpAdd, OpSub, OpMul)
	}
	for _, v := range []int64{t.A, t.B} {
		if v < -MaxOperand || v > MaxOperand {
			return Task{}, fmt.Errorf("operand %d outside ±%d", v, MaxOperand)
		}
	}
	return t, nil
}

const instructions = `Compute the exact integer result of the task. Give it by calling the tool "answer" with {"value": <integer>}; then reply "done".
The task's last line, "TASK {...}", states it as JSON.`

var answerSchema = json.RawMessage(`{"type":"object","properties":{"value":{"type":"integer"}},"required":["value"],"additionalProperties":false}`)

// Env is the arithmetic environment. It holds no state and is safe for
// concurrent use.
type Env struct{}

// New returns the environment.
func New() *Env { return &Env{} }

// Spec declares a stateless, tool-style environment with the tool "answer".
func (*Env) Spec() envs.Spec {
	return envs.Spec{
		Name:  Name,
		Mode:  envs.ModeStateless,
		Style: envs.StyleTools,
		Tools: []envs.Tool{{
			Name:        AnswerTool,
			Description: "Submit the integer result of the task. The last answer counts.",
			Parameters:  answerSchema,
		}},
	}
}

// Start poses task; the seed plays no part.
func (*Env) Start(_ int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	t, err := parseTask(task)
	if err != nil {
		return nil, envs.Start{}, envs.Errorf(envs.CodeBadTask, "arithmetic task: %v", err)
	}
	line, err := json.Marshal(t)
	if err != nil {
		return nil, envs.Start{}, fmt.Errorf("arithmetic task line: %w", err)
	}
	return &session{task: t}, envs.Start{
		Instructions: instructions,
		Observation:  fmt.Sprintf("What is %d %s %d?\n%s%s", t.A, t.Op, t.B, TaskPrefix, line),
	}, nil
}

// exportedState is the task and the last answer. Nothing here needs saving
// (the environment is stateless), but Export and Restore stay exact so that
// a server treating every environment alike loses nothing.
type exportedState struct {
	Version int    `json:"version"`
	Task    Task   `json:"task"`
	Answer  *int64 `json:"answer"`
}

type exportedFields struct {
	Version int             `json:"version"`
	Task    json.RawMessage `json:"task"`
	Answer  *int64          `json:"answer"`
}

// Restore rebuilds a session from Export output, refusing anything else.
func (*Env) Restore(state json.RawMessage) (envs.Session, error) {
	var f exportedFields
	if err := decodeStrict(state, &f); err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "arithmetic state: %v", err)
	}
	if f.Version != stateVersion {
		return nil, envs.Errorf(envs.CodeBadState, "arithmetic state: version %d, want %d", f.Version, stateVersion)
	}
	t, err := parseTask(f.Task)
	if err != nil {
		return nil, envs.Errorf(envs.CodeBadState, "arithmetic state: task: %v", err)
	}
	return &session{task: t, answer: f.Answer}, nil
}

// GenerateTask returns task number index of the task set seeded with seed:
// sums and differences of operands up to 1000, products up to 100.
func GenerateTask(seed int64, index int) json.RawMessage {
	r := newSplitmix(mix(uint64(seed)) + uint64(int64(index))*gamma + 0x61726974686d6574) // salt "arithmet"
	t := Task{Op: []string{OpAdd, OpSub, OpMul}[r.next()%3]}
	limit := uint64(1000)
	if t.Op == OpMul {
		limit = 100
	}
	t.A = int64(r.next()%(2*limit+1)) - int64(limit)
	t.B = int64(r.next()%(2*limit+1)) - int64(limit)
	b, _ := json.Marshal(t)
	return b
}

type session struct {
	task   Task
	answer *int64 // the last answer, nil before the first
}

type answerArgs struct {
	Value json.RawMessage `json:"value"` // raw, so that "5" and 5.0 are refused

}

// Apply records an answer. Refusals leave the session unchanged.
func (s *session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool != AnswerTool {
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "arithmetic has no tool %q (only %q)", tool, AnswerTool)
	}
	var a answerArgs
	if err := decodeStrict(args, &a); err != nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "answer arguments: %v", err)
	}
	if len(a.Value) == 0 || string(a.Value) == "null" {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, `answer arguments: missing "value"`)
	}
	v, err := strconv.ParseInt(string(a.Value), 10, 64)
	if err != nil {
		return envs.Outcome{}, envs.Errorf(envs.CodeBadArguments, "answer value %s is not a 64-bit integer", a.Value)
	}
	s.answer = &v
	return envs.Outcome{Observation: fmt.Sprintf("Received answer %d.", v)}, nil
}

type verdictDetails struct {
	Expected int64  `json:"expected"`
	Answer   *int64 `json:"answer"`
}

// Verify scores 1 if the last answer is the exact result, else 0.
func (s *session) Verify() (envs.Verdict, error) {
	want := s.task.Result()
	b, err := json.Marshal(verdictDetails{Expected: want, Answer: s.answer})
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("arithmetic verdict details: %w", err)
	}
	v := envs.Verdict{Details: b}
	if s.answer != nil && *s.answer == want {
		v.Reward = 1
	}
	return v, nil
}

// Export returns the task and the last answer as deterministic JSON.
func (s *session) Export() (json.RawMessage, error) {
	b, err := json.Marshal(exportedState{Version: stateVersion, Task: s.task, Answer: s.answer})
	if err != nil {
		return nil, fmt.Errorf("arithmetic export: %w", err)
	}
	return b, nil
}

// Close has nothing to release.
func (s *session) Close() error { return nil }

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data; numbers stay exact (json.Number).
func decodeStrict(data json.RawMessage, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

const gamma = 0x9e3779b97f4a7c15

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

type splitmix struct{ state uint64 }

func newSplitmix(state uint64) *splitmix { return &splitmix{state: state} }

func (s *splitmix) next() uint64 {
	s.state += gamma
	return mix(s.state)
}
