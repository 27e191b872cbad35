package counter

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

const (
	// Done is the counter policy's final answer.
	Done = "done"

	// counterTaskPrefix starts the machine-readable task line of the counter
	// environment's task statement: TASK {"start":S,"target":T}.
	counterTaskPrefix = "TASK "
	// counterValuePrefix starts the first line of a successful increment's
	// observation: counter=K.
	counterValuePrefix = "counter="
	// counterSalt separates the counter policy's episode draws from those of
	// other policies given the same seed and task.
	counterSalt = "counter"
	// counterArguments is the arguments of every increment call.
	counterArguments = `{"amount":1}`
)

// Policy is the scripted policy of the counter environment: it increments by
// one until the counter reaches the target, then answers "done". With
// probability the request's Imperfection (drawn once per episode from the seed and
// the task) it aims one off the target, so rewards vary across seeds.
type Policy struct{}

// counterTask is the task line of the first user message.
type counterTask struct {
	Start  *int64 `json:"start"`
	Target *int64 `json:"target"`
}

// Respond returns the next assistant message. It depends only on req.
func (Policy) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	start, target, err := parseCounterTask(req.Messages)
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("counter policy: %w", err)
	}
	if len(req.Tools) > 0 && !slices.Contains(req.Tools, ToolIncrement) {
		return envs.PolicyResponse{}, fmt.Errorf("counter policy: tool %q is not among the offered tools %v", ToolIncrement, req.Tools)
	}
	value, err := counterValue(req.Messages, start)
	if err != nil {
		return envs.PolicyResponse{}, fmt.Errorf("counter policy: %w", err)
	}
	if value < counterGoal(req, start, target) {
		return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{
			ID:        envs.CallID(req.Messages, 0),
			Name:      ToolIncrement,
			Arguments: counterArguments,
		}}}, nil
	}
	return envs.PolicyResponse{Content: Done}, nil
}

// counterGoal is the value the policy stops at: the target, or on a
// deliberate miss one below it. When one below is not reachable from the
// start (the counter only goes up, e.g. T == 0), the miss overshoots to T+1.
func counterGoal(req envs.PolicyRequest, start, target int64) int64 {
	if envs.EpisodeRand(req.Seed, req.Messages, counterSalt).Float64() >= req.Imperfection {
		return target
	}
	if target-1 >= start {
		return target - 1
	}
	return target + 1
}

// parseCounterTask reads start and target from the TASK line of the first
// user message.
func parseCounterTask(msgs []envs.Message) (start, target int64, err error) {
	i := slices.IndexFunc(msgs, func(m envs.Message) bool { return m.Role == "user" })
	if i < 0 {
		return 0, 0, errors.New("no user message holding the TASK line")
	}
	for line := range strings.Lines(msgs[i].Content) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, counterTaskPrefix) {
			continue
		}
		var t counterTask
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, counterTaskPrefix)), &t); err != nil {
			return 0, 0, fmt.Errorf("malformed TASK line %q: %w", line, err)
		}
		if t.Start == nil || t.Target == nil {
			return 0, 0, fmt.Errorf("TASK line %q lacks start or target", line)
		}
		return *t.Start, *t.Target, nil
	}
	return 0, 0, fmt.Errorf("first user message has no TASK line (want %s{\"start\":S,\"target\":T})", counterTaskPrefix)
}

// counterValue is the counter as last shown: the first line counter=K of the
// latest tool message that shows it, else start. A tool message that does not
// start with counter= shows an error, so the value it reports is unknown and
// the previous one stands; since the policy only calls increment while below
// its goal, that means the increment is tried again.
func counterValue(msgs []envs.Message, start int64) (int64, error) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != "tool" || !strings.HasPrefix(m.Content, counterValuePrefix) {
			continue
		}
		first, _, _ := strings.Cut(m.Content, "\n")
		v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(first, counterValuePrefix)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("tool message %d: malformed counter line %q: %w", i, first, err)
		}
		return v, nil
	}
	return start, nil
}
