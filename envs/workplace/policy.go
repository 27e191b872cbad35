package workplace

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// Done is the workplace policy's final answer.
	Done = "done"
	// workplaceSalt separates this policy's episode draws from other
	// policies' given the same seed and task.
	workplaceSalt = "workplace"
	// workplaceAlteration is appended to a text argument to spoil a step.
	workplaceAlteration = " (draft)"
)

// Policy is the scripted policy of the workplace environment. It
// regenerates the task from the TASK line of the first user message, asks the
// environment package for the plan that reaches the ground truth, and emits
// one planned tool call per turn; the number of tool messages so far is its
// position in the plan, so it needs no memory and a restored conversation
// resumes at the right step. After the last step it answers "done".
//
// With probability the request's Imperfection (drawn once per episode) it skips or
// alters one state-changing step, so the episode ends with reward 0. Reads are
// never chosen: spoiling one would not change the outcome.
type Policy struct{}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	plan, err := PolicyPlan(req)
	if err != nil {
		return envs.PolicyResponse{}, err
	}
	step := envs.ToolReplies(req.Messages)
	if step >= len(plan) {
		return envs.PolicyResponse{Content: Done}, nil
	}
	c := plan[step]
	if len(req.Tools) > 0 && !slices.Contains(req.Tools, c.Tool) {
		return envs.PolicyResponse{}, fmt.Errorf("workplace policy: tool %q is not among the offered tools %v", c.Tool, req.Tools)
	}
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{
		ID:        envs.CallID(req.Messages, 0),
		Name:      c.Tool,
		Arguments: string(c.Arguments),
	}}}, nil
}

// PolicyPlan is the sequence of tool calls the policy makes for req's
// episode, after any deliberate mistake.
func PolicyPlan(req envs.PolicyRequest) ([]Call, error) {
	i := slices.IndexFunc(req.Messages, func(m envs.Message) bool { return m.Role == "user" })
	if i < 0 {
		return nil, errors.New("workplace policy: no user message holding the TASK line")
	}
	task, ok := TaskFromObservation(req.Messages[i].Content)
	if !ok {
		return nil, fmt.Errorf("workplace policy: first user message has no %s{...} line", TaskLinePrefix)
	}
	plan, err := Plan(task)
	if err != nil {
		return nil, fmt.Errorf("workplace policy: %w", err)
	}
	r := envs.EpisodeRand(req.Seed, req.Messages, workplaceSalt)
	if r.Float64() >= req.Imperfection {
		return plan, nil
	}
	var mutations []int
	for j, c := range plan {
		if IsMutation(c.Tool) {
			mutations = append(mutations, j)
		}
	}
	if len(mutations) == 0 {
		return plan, nil // nothing to spoil; every generated task has a mutation
	}
	at := mutations[r.IntN(len(mutations))]
	if r.IntN(2) == 0 {
		if altered, ok := alterText(plan[at].Arguments); ok {
			plan[at].Arguments = altered
			return plan, nil
		}
	}
	return slices.Delete(plan, at, at+1), nil
}

// alterText appends a marker to the "body" or "title" argument, if there is
// one, so the step still succeeds but writes the wrong text.
func alterText(args json.RawMessage) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, false
	}
	for _, key := range []string{"body", "title"} {
		var s string
		if err := json.Unmarshal(m[key], &s); err != nil {
			continue
		}
		v, err := json.Marshal(s + workplaceAlteration)
		if err != nil {
			return nil, false
		}
		m[key] = v
		b, err := json.Marshal(m)
		if err != nil {
			return nil, false
		}
		return b, true
	}
	return nil, false
}
