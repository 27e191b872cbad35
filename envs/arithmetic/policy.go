package arithmetic

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// Done is the arithmetic policy's final answer.
	Done = "done"

	// arithmeticTaskPrefix starts the task line of the arithmetic
	// environment's task statement: TASK {"a":A,"b":B,"op":"+"}.
	arithmeticTaskPrefix = "TASK "
	// arithmeticReceiptPrefix starts the observation of an accepted answer.
	arithmeticReceiptPrefix = "Received answer"
	// arithmeticSalt separates this policy's episode draws from other
	// policies' given the same seed and task.
	arithmeticSalt = "arithmetic"
)

// Policy is the scripted policy of the arithmetic environment: it
// computes the task of the first user message exactly, answers it with one
// tool call, and says "done" once the environment confirmed the answer. A
// tool message that is not a confirmation (a refusal) makes it answer again.
//
// With probability the request's Imperfection (drawn once per episode) the answer
// is one off, so rewards vary across seeds.
type Policy struct{}

type arithmeticTask struct {
	A  *int64  `json:"a"`
	B  *int64  `json:"b"`
	Op *string `json:"op"`
}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	value, err := arithmeticResult(req.Messages)
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("arithmetic policy: %w", err)
	}
	if len(req.Tools) > 0 && !slices.Contains(req.Tools, AnswerTool) {
		return envs.PolicyResponse{}, fmt.Errorf("arithmetic policy: tool %q is not among the offered tools %v", AnswerTool, req.Tools)
	}
	if arithmeticConfirmed(req.Messages) {
		return envs.PolicyResponse{Content: Done}, nil
	}
	r := envs.EpisodeRand(req.Seed, req.Messages, arithmeticSalt)
	if r.Float64() < req.Imperfection {
		if r.IntN(2) == 0 {
			value.Sub(value, big.NewInt(1))
		} else {
			value.Add(value, big.NewInt(1))
		}
	}
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{
		ID:        envs.CallID(req.Messages, 0),
		Name:      AnswerTool,
		Arguments: fmt.Sprintf(`{"value":%s}`, value.String()),
	}}}, nil
}

// arithmeticConfirmed tells whether the latest tool message confirms an
// answer.
func arithmeticConfirmed(msgs []envs.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "tool" {
			return strings.HasPrefix(msgs[i].Content, arithmeticReceiptPrefix)
		}
	}
	return false
}

// arithmeticResult reads the TASK line of the first user message and returns
// its exact result (big, so no operands can overflow it).
func arithmeticResult(msgs []envs.Message) (*big.Int, error) {
	i := slices.IndexFunc(msgs, func(m envs.Message) bool { return m.Role == "user" })
	if i < 0 {
		return nil, errors.New("no user message holding the TASK line")
	}
	for line := range strings.Lines(msgs[i].Content) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, arithmeticTaskPrefix) {
			continue
		}
		var t arithmeticTask
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, arithmeticTaskPrefix)), &t); err != nil {
			return nil, fmt.Errorf("malformed TASK line %q: %w", line, err)
		}
		if t.A == nil || t.B == nil || t.Op == nil {
			return nil, fmt.Errorf("TASK line %q lacks a, b or op", line)
		}
		a, b := big.NewInt(*t.A), big.NewInt(*t.B)
		switch *t.Op {
		case "+":
			return a.Add(a, b), nil
		case "-":
			return a.Sub(a, b), nil
		case "*":
			return a.Mul(a, b), nil
		default:
			return nil, fmt.Errorf("TASK line %q: unknown op %q", line, *t.Op)
		}
	}
	return nil, fmt.Errorf(`first user message has no TASK line (want %s{"a":A,"b":B,"op":"+"})`, arithmeticTaskPrefix)
}
