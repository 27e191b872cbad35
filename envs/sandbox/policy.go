package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// Done is the sandbox policy's final answer.
	Done = "done"
	// sandboxSalt separates this policy's episode draws from other policies'
	// given the same seed and task.
	sandboxSalt = "sandbox"
	// sandboxAlteration is appended to a file's content to spoil it.
	sandboxAlteration = "draft\n"
)

// Policy is the scripted policy of the sandbox environment. It reads the
// expected files from the TASK line of the first user message and writes one
// file per turn, in sorted name order; the number of tool messages so far is
// its position, so it needs no memory and a restarted conversation resumes at
// the right file. After the last file it answers "done".
//
// With probability the request's Imperfection (drawn once per episode) it writes one
// file, chosen by the same draw, with wrong content, so the episode ends with
// reward 0.
type Policy struct{}

// WriteFileArgs is the arguments of one write_file call.
type WriteFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	writes, err := PolicyPlan(req)
	if err != nil {
		return envs.PolicyResponse{}, err
	}
	step := envs.ToolReplies(req.Messages)
	if step >= len(writes) {
		return envs.PolicyResponse{Content: Done}, nil
	}
	if len(req.Tools) > 0 && !slices.Contains(req.Tools, ToolWriteFile) {
		return envs.PolicyResponse{}, fmt.Errorf("sandbox policy: tool %q is not among the offered tools %v", ToolWriteFile, req.Tools)
	}
	args, err := json.Marshal(writes[step])
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("sandbox policy: encode write_file arguments: %w", err)
	}
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{
		ID:        envs.CallID(req.Messages, 0),
		Name:      ToolWriteFile,
		Arguments: string(args),
	}}}, nil
}

// PolicyPlan is the write_file arguments the policy sends for req's episode,
// in order, after any deliberate mistake.
func PolicyPlan(req envs.PolicyRequest) ([]WriteFileArgs, error) {
	i := slices.IndexFunc(req.Messages, func(m envs.Message) bool { return m.Role == "user" })
	if i < 0 {
		return nil, errors.New("sandbox policy: no user message holding the TASK line")
	}
	task, err := TaskFromObservation(req.Messages[i].Content)
	if err != nil {
		return nil, fmt.Errorf("sandbox policy: first user message: %w", err)
	}
	names := task.Names()
	writes := make([]WriteFileArgs, len(names))
	for j, name := range names {
		writes[j] = WriteFileArgs{Path: name, Content: task.Files[name]}
	}
	r := envs.EpisodeRand(req.Seed, req.Messages, sandboxSalt)
	if r.Float64() < req.Imperfection {
		at := r.IntN(len(writes)) // a parsed task has at least one file
		writes[at].Content += sandboxAlteration
	}
	return writes, nil
}
