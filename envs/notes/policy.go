package notes

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// Done is the notes policy's final answer.
	Done = "done"
	// taskPrefix starts the machine-readable line of the task statement:
	// TASK {"edits":[{"tool":...,"arguments":{...}}, ...]}.
	taskPrefix = "TASK "
	// refusalPrefix starts a tool message that reports a refused call.
	refusalPrefix = "error:"
	// salt separates this policy's episode draws from other policies'.
	salt = "notes"
)

// Policy is the scripted policy of the notes environment: it lists the
// notes first, then makes the task's edits in order, one tool call per
// turn, and answers "done". A refused call is made again. With probability
// the request's Imperfection (drawn once per episode from the seed and the
// task) it forgets the last edit, so rewards vary.
type Policy struct{}

// edit is one edit of the TASK line.
type edit struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	edits, err := parseTask(req.Messages)
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("notes policy: %w", err)
	}
	for _, t := range []string{ToolList, ToolWrite, ToolAppend, ToolDelete} {
		if len(req.Tools) > 0 && !slices.Contains(req.Tools, t) {
			return envs.PolicyResponse{}, fmt.Errorf("notes policy: tool %q is not among the offered tools %v", t, req.Tools)
		}
	}
	if envs.EpisodeRand(req.Seed, req.Messages, salt).Float64() < req.Imperfection {
		edits = edits[:len(edits)-1]
	}
	// Step 0 lists the notes, step k > 0 makes edit k-1.
	step := accepted(req.Messages)
	call := envs.ToolCall{ID: envs.CallID(req.Messages, 0)}
	switch {
	case step == 0:
		call.Name, call.Arguments = ToolList, "{}"
	case step <= len(edits):
		call.Name, call.Arguments = edits[step-1].Tool, string(edits[step-1].Arguments)
	default:
		return envs.PolicyResponse{Content: Done}, nil
	}
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{call}}, nil
}

// accepted counts the tool messages that report an accepted call.
func accepted(msgs []envs.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "tool" && !strings.HasPrefix(m.Content, refusalPrefix) {
			n++
		}
	}
	return n
}

// parseTask reads the edits from the TASK line of the first user message.
func parseTask(msgs []envs.Message) ([]edit, error) {
	i := slices.IndexFunc(msgs, func(m envs.Message) bool { return m.Role == "user" })
	if i < 0 {
		return nil, errors.New("no user message holding the TASK line")
	}
	for line := range strings.Lines(msgs[i].Content) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, taskPrefix) {
			continue
		}
		var t struct {
			Edits []edit `json:"edits"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, taskPrefix)), &t); err != nil {
			return nil, fmt.Errorf("malformed TASK line %q: %w", line, err)
		}
		if len(t.Edits) == 0 {
			return nil, fmt.Errorf("TASK line %q lists no edits", line)
		}
		for j, e := range t.Edits {
			if e.Tool == "" || !json.Valid(e.Arguments) {
				return nil, fmt.Errorf("TASK line: edit %d has no tool or no JSON arguments", j)
			}
		}
		return t.Edits, nil
	}
	return nil, fmt.Errorf(`first user message has no TASK line (want %s{"edits":[...]})`, taskPrefix)
}
